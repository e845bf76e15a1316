// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/fake"
)

// TestRunNameAtTheLimit: Karpenter names a claim "<nodepool>-<5 characters>" with the API
// server's generateName, which keeps at most 58 characters of the NodePool's name, so claim
// names have up to 63 characters (NodePool names are DNS subdomains and may have dots). Every
// run name is a DNS-1123 label of at most 63 characters (a Job's name, a pod's hostname),
// stable, and different per operation and attempt; short ones stay readable as they were.
func TestRunNameAtTheLimit(t *testing.T) {
	pool := strings.Repeat("p", 63)
	claim := pool[:58] + "x7k2q" // what generateName makes of "<pool>-"
	dotted := "gpu.large-x7k2q"
	seen := map[string]string{}
	for _, name := range []string{claim, "sim-x7k2q", dotted, strings.Repeat("a", 40) + "-x7k2q"} {
		f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, op := range []tfrunner.Operation{tfrunner.Apply, tfrunner.Destroy} {
			for _, attempt := range []int{1, 2, 10, 123} {
				run := runName(f, op, attempt)
				if errs := validation.IsDNS1123Label(run); len(errs) > 0 {
					t.Errorf("run %d of %s of claim %s: %q is no DNS-1123 label: %v", attempt, op, name, run, errs)
				}
				if again := runName(f, op, attempt); again != run {
					t.Errorf("run name not stable: %q, then %q", run, again)
				}
				if prev, dup := seen[run]; dup {
					t.Errorf("run name %q for both %s and %s %s %d", run, prev, name, op, attempt)
				}
				seen[run] = name + " " + string(op)
				if full := name + "-" + string(op) + "-" + strconv.Itoa(attempt); len(full) <= 63 && !strings.Contains(name, ".") && run != full {
					t.Errorf("run name %q, want the readable %q", run, full)
				}
				if !strings.HasSuffix(run, "-"+string(op)+"-"+strconv.Itoa(attempt)) {
					t.Errorf("run name %q does not end in its operation and attempt", run)
				}
			}
		}
	}
}

// TestRunNameTakenByAnEarlierClaim: a claim deleted and made again under the same name finds
// its first run names taken by the earlier claim's runs (their Jobs stay for their logs): it
// never adopts them, and runs under the next free attempt's name instead, labelled with its
// own UID.
func TestRunNameTakenByAnEarlierClaim(t *testing.T) {
	ctx := context.Background()
	kube := test.NewClient(nil)
	clk := clocktesting.NewFakeClock(time.Now())
	exec := fake.New(clk)
	for _, taken := range []string{"claim-a-apply-1", "claim-a-apply-2", "claim-a-destroy-1"} {
		exec.Fail(fake.MethodStart, taken, fmt.Errorf("run %s: %w", taken, executor.ErrOtherClaimsRun), -1)
	}
	c := NewFulfillmentController(kube, kube, clk, nil, exec, NewUnavailableOfferings(clk, time.Minute), Options{Namespace: "fulfiller", TofuPath: "/bin/tofu"})
	nc := testClass()
	f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim-a"}}
	f.Spec.NodeClaimUID, f.Spec.StateKey, f.Spec.Module, f.Spec.NodeName = "uid-new", "claim-a", "/m", "claim-a"
	s := &claimState{f: f, nc: nc, nt: &nc.Spec.NodeTypes[0], conds: f.StatusConditions()}
	if _, err := c.applyRuns().start(ctx, s, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.destroyRuns().start(ctx, s, 1, true); err != nil {
		t.Fatal(err)
	}
	names := exec.Created()
	for _, name := range names {
		req, _ := exec.Request(name)
		if req.Labels[tfrunner.LabelNodeClaimUID] != "uid-new" || req.Labels[tfrunner.LabelNodeClaim] != "claim-a" {
			t.Errorf("run %s labels %v", req.Name, req.Labels)
		}
	}
	if strings.Join(names, ",") != "claim-a-apply-3,claim-a-destroy-2" {
		t.Fatalf("started %v, want the first names no earlier claim has", names)
	}
	if apply := lastRun(f, tfrunner.Apply); apply == nil || apply.Name != "claim-a-apply-3" || apply.Attempt != 3 || runsMade(f, tfrunner.Apply) != 1 {
		t.Errorf("recorded apply %+v", apply)
	}
	if destroy := lastRun(f, tfrunner.Destroy); destroy == nil || destroy.Name != "claim-a-destroy-2" {
		t.Errorf("recorded destroy %+v", destroy)
	}
}

// TestFinalizeWaitsForTheApplyToStop: deleting a claim whose apply runs cancels the apply and
// requeues the claim while the runner stops (no worker waits for it); the destroy starts only
// once the apply has ended.
func TestFinalizeWaitsForTheApplyToStop(t *testing.T) {
	ctx := context.Background()
	kube := test.NewClient(nil)
	clk := clocktesting.NewFakeClock(time.Now())
	exec := fake.New(clk)
	exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Hold: true, StopDelay: 10 * time.Second})
	c := NewFulfillmentController(kube, kube, clk, nil, exec, NewUnavailableOfferings(clk, time.Minute), Options{Namespace: "fulfiller", TofuPath: "/bin/tofu"})
	nc := testClass()
	f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim-a"}}
	f.Spec.NodeClaimUID, f.Spec.StateKey, f.Spec.Module, f.Spec.NodeName = "uid-a", "claim-a", "/m", "claim-a"
	s := &claimState{f: f, nc: nc, nt: &nc.Spec.NodeTypes[0], conds: f.StatusConditions()}
	if _, err := c.applyRuns().start(ctx, s, 1, true); err != nil {
		t.Fatal(err)
	}
	d := &finalizeStage{c: c}
	res, err := d.reconcile(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	cancels := func() int {
		n := 0
		for _, call := range exec.Calls() {
			if call.Method == fake.MethodCancel {
				n++
			}
		}
		return n
	}
	cond := s.conds.Get(v1alpha1.ConditionDestroyed)
	if res.RequeueAfter != pollInterval || cancels() != 1 || len(exec.Created()) != 1 || cond == nil || cond.Reason != v1alpha1.ReasonStoppingApply {
		t.Fatalf("while the apply stops: requeue %s, %d cancels, created %v, Destroyed %+v", res.RequeueAfter, cancels(), exec.Created(), cond)
	}
	clk.Step(10 * time.Second)
	if _, err := d.reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if apply := lastRun(f, tfrunner.Apply); apply.Phase != v1alpha1.RunFailed || apply.ErrorClass != string(tfrunner.Cancelled) {
		t.Errorf("the stopped apply is recorded as %+v", apply)
	}
	// No state was written: nothing to destroy, and the claim may go.
	if !s.removeFinalizer || len(exec.Created()) != 1 {
		t.Errorf("after the apply stopped: removeFinalizer %v, created %v", s.removeFinalizer, exec.Created())
	}
}
