// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
)

// scrape reads the controller's metrics endpoint: each sample line's name{labels} and value.
func scrape(t *testing.T) map[string]float64 {
	t.Helper()
	port, err := os.ReadFile(devenv.Layout{Dir: env.dir}.MetricsPortFile())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%s/metrics", strings.TrimSpace(string(port))))
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndex(line, " ")
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sumOf is the sum of a metric's series whose labels contain each of labels, and how many
// series there were.
func sumOf(samples map[string]float64, name string, labels ...string) (float64, int) {
	var sum float64
	var n int
	for series, v := range samples {
		if strings.HasPrefix(series, name+"{") && containsAll(series, labels) {
			sum += v
			n++
		}
	}
	return sum, n
}

// assertBurstMetrics checks the stage, run and cost metrics against the Ready claims of one
// NodePool (named as its class): counts equal to the claims and runs made, durations the sum
// of the stage times their Fulfillments recorded, cost the sum of their prices and Karpenter's.
func assertBurstMetrics(t *testing.T, ffs []v1alpha1.Fulfillment) {
	t.Helper()
	class := ffs[0].Spec.NodeClass
	m := scrape(t)
	claims := float64(len(ffs))
	var queued, registered, initialized, applied, price float64
	for _, f := range ffs {
		st := f.Status.Stages
		queued += st.ApplyStarted.Sub(st.ClaimCreated.Time).Seconds()
		registered += st.Registered.Sub(st.ClaimCreated.Time).Seconds()
		initialized += st.Initialized.Sub(st.Registered.Time).Seconds()
		r := f.Status.Runs[0]
		applied += r.CompletionTime.Sub(r.StartTime.Time).Seconds()
		p, err := strconv.ParseFloat(f.Spec.Price, 64)
		if err != nil {
			t.Fatalf("fulfillment %s: price %q: %v", f.Name, f.Spec.Price, err)
		}
		price += p
	}
	inClass := fmt.Sprintf(`class=%q`, class)
	for _, c := range []struct {
		metric string
		labels []string
		want   float64
	}{
		{"fulfiller_runs_total", []string{`operation="apply"`, `result="Succeeded"`}, claims},
		{"fulfiller_runs_total", []string{`result="Failed"`}, 0},
		{"fulfiller_runs_duration_seconds_count", []string{`operation="apply"`}, claims},
		{"fulfiller_runs_duration_seconds_sum", []string{`operation="apply"`}, applied},
		{"fulfiller_nodeclaims_apply_queue_duration_seconds_count", nil, claims},
		{"fulfiller_nodeclaims_apply_queue_duration_seconds_sum", nil, queued},
		{"fulfiller_nodeclaims_registration_duration_seconds_count", nil, claims},
		{"fulfiller_nodeclaims_registration_duration_seconds_sum", nil, registered},
		{"fulfiller_nodeclaims_initialization_duration_seconds_count", nil, claims},
		{"fulfiller_nodeclaims_initialization_duration_seconds_sum", nil, initialized},
		{"fulfiller_nodeclaims", []string{`phase="Ready"`}, claims},
		{"fulfiller_runs_in_flight", nil, 0},
		{"fulfiller_nodeclaim_hourly_cost", nil, price},
		// One join token per claim, revoked once its Node registered; no claim's state lock
		// was held by another.
		{"fulfiller_bootstrap_tokens_total", []string{`event="minted"`}, claims},
		{"fulfiller_bootstrap_tokens_total", []string{`event="revoked"`}, claims},
		{"fulfiller_state_lock_waits_total", nil, 0},
	} {
		got, _ := sumOf(m, c.metric, append([]string{inClass}, c.labels...)...)
		if math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%s{%s %s} = %v, want %v", c.metric, inClass, strings.Join(c.labels, " "), got, c.want)
		}
	}
	if _, n := sumOf(m, "fulfiller_nodeclaims", inClass, `nodepool="`+ffs[0].Spec.NodePool+`"`, `instance_type="`, `capacity_type="`, `zone="`, fmt.Sprintf(`family=%q`, v1alpha1.FamilySim)); n == 0 {
		t.Errorf("fulfiller_nodeclaims has no series with the claim labels of NodePool %s", ffs[0].Spec.NodePool)
	}
	karpenter, n := sumOf(m, "karpenter_nodepools_cost_total", fmt.Sprintf(`nodepool=%q`, ffs[0].Spec.NodePool))
	if n != 1 || math.Abs(karpenter-price) > 1e-6 {
		t.Errorf("karpenter_nodepools_cost_total of %s = %v (%d series), fulfiller_nodeclaim_hourly_cost sums to %v", ffs[0].Spec.NodePool, karpenter, n, price)
	}
	assertConditionMetrics(t, ffs)
	out := kubectl(t, "get", "fulfillments")
	if !strings.Contains(out, "PRICE") || !strings.Contains(out, ffs[0].Spec.Price) {
		t.Errorf("kubectl get fulfillments does not show the price %s:\n%s", ffs[0].Spec.Price, out)
	}
}

// assertConditionMetrics checks the status-condition metrics and events of the Ready claims
// of one class and of the class (operatorpkg's status controllers): each claim's Ready=True
// counted once, as many Ready transitions to True as claims, the class Ready, and an event
// for a claim's Ready transition. The status controllers watch what the Fulfillment
// controller wrote; the metrics are scraped until they have seen it.
func assertConditionMetrics(t *testing.T, ffs []v1alpha1.Fulfillment) {
	t.Helper()
	class := ffs[0].Spec.NodeClass
	var problems []string
	err := devenv.Poll(context.Background(), time.Minute, time.Second, "the status-condition metrics of class "+class, func(ctx context.Context) (bool, error) {
		m := scrape(t)
		problems = nil
		for _, f := range ffs {
			if got, n := sumOf(m, "operator_fulfillment_status_condition_count", fmt.Sprintf(`name=%q`, f.Name), `type="Ready"`, `status="True"`); got != 1 || n != 1 {
				problems = append(problems, fmt.Sprintf("operator_fulfillment_status_condition_count{name=%s,type=Ready,status=True} = %v (%d series), want 1", f.Name, got, n))
			}
		}
		if got, _ := sumOf(m, "operator_fulfillment_status_condition_transitions_total", fmt.Sprintf(`class=%q`, class), `type="Ready"`, `status="True"`); got != float64(len(ffs)) {
			problems = append(problems, fmt.Sprintf("operator_fulfillment_status_condition_transitions_total{class=%s,type=Ready,status=True} = %v, want %d", class, got, len(ffs)))
		}
		if got, _ := sumOf(m, "operator_tofunodeclass_status_condition_count", fmt.Sprintf(`name=%q`, class), `type="Ready"`, `status="True"`); got != 1 {
			problems = append(problems, fmt.Sprintf("operator_tofunodeclass_status_condition_count{name=%s,type=Ready,status=True} = %v, want 1", class, got))
		}
		events, err := clientset(t).CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Fulfillment,reason=Ready"})
		if err != nil {
			return false, err
		}
		transitioned := false
		for _, e := range events.Items {
			if e.InvolvedObject.Name == ffs[0].Name && strings.Contains(e.Message, "Type: Ready, Status: Unknown -> True") {
				transitioned = true
			}
		}
		if !transitioned {
			problems = append(problems, "no event of "+ffs[0].Name+"'s Ready transition to True")
		}
		return len(problems) == 0, nil
	})
	if err != nil {
		t.Errorf("%v:\n%s", err, strings.Join(problems, "\n"))
	}
}

// assertDestroyMetrics checks that each of a class's destroyed claims was counted once.
func assertDestroyMetrics(t *testing.T, class string, claims int) {
	t.Helper()
	m := scrape(t)
	inClass := fmt.Sprintf(`class=%q`, class)
	if got, _ := sumOf(m, "fulfiller_runs_duration_seconds_count", inClass, `operation="destroy"`, `result="Succeeded"`); got != float64(claims) {
		t.Errorf("fulfiller_runs_duration_seconds_count{operation=destroy} = %v, want %d", got, claims)
	}
	if got, _ := sumOf(m, "fulfiller_nodeclaims_destroy_duration_seconds_count", inClass); got != float64(claims) {
		t.Errorf("fulfiller_nodeclaims_destroy_duration_seconds_count = %v, want %d", got, claims)
	}
	if got, _ := sumOf(m, "fulfiller_runs_total", inClass, `operation="destroy"`, `result="Succeeded"`); got != float64(claims) {
		t.Errorf("fulfiller_runs_total{operation=destroy,result=Succeeded} = %v, want %d", got, claims)
	}
	if _, n := sumOf(m, "fulfiller_nodeclaims", inClass); n != 0 {
		t.Errorf("fulfiller_nodeclaims still has %d series of class %s after every claim is gone", n, class)
	}
	if got, _ := sumOf(m, "operator_fulfillment_termination_duration_seconds_count", inClass); got != float64(claims) {
		t.Errorf("operator_fulfillment_termination_duration_seconds_count{class=%s} = %v, want %d", class, got, claims)
	}
	if _, n := sumOf(m, "operator_fulfillment_status_condition_count", inClass); n != 0 {
		t.Errorf("operator_fulfillment_status_condition_count still has %d series of class %s after every claim is gone", n, class)
	}
}
