// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

func TestObserveChanges(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(s int) *metav1.Time { m := metav1.NewTime(t0.Add(time.Duration(s) * time.Second)); return &m }
	base := func() *v1alpha1.Fulfillment {
		f := &v1alpha1.Fulfillment{Spec: v1alpha1.FulfillmentSpec{NodePool: "default", NodeType: "cx22", CapacityType: "on-demand", Zone: "fsn1", NodeClass: "hcloud"}}
		f.Status.Stages.ClaimCreated = at(0)
		return f
	}
	type sample struct {
		metric string
		labels prometheus.Labels
		value  float64
	}
	name := func(o observation) string {
		for _, c := range []struct {
			h *prometheus.HistogramVec
			n string
		}{{applyQueueDuration, "queue"}, {registrationDuration, "registration"}, {initializationDuration, "initialization"}, {destroyDuration, "destroy"}, {runDuration, "run"}} {
			if o.histogram == c.h {
				return c.n
			}
		}
		for _, c := range []struct {
			c *prometheus.CounterVec
			n string
		}{{runsTotal, "runs"}, {runRetries, "retries"}, {bootstrapTokens, "tokens"}, {bootReports, "reports"}, {lockWaits, "lockwaits"}} {
			if o.counter == c.c {
				return c.n
			}
		}
		return "unknown"
	}
	common := prometheus.Labels{"nodepool": "default", "instance_type": "cx22", "capacity_type": "on-demand", "zone": "fsn1", "class": "hcloud", "family": "hcloud"}
	cases := []struct {
		name   string
		change func(before, after *v1alpha1.Fulfillment)
		want   []sample
	}{
		{"nothing changed", func(_, _ *v1alpha1.Fulfillment) {}, nil},
		{"apply started after queueing", func(_, a *v1alpha1.Fulfillment) {
			a.Status.Stages.ApplyStarted = at(7)
			a.Status.Runs = []v1alpha1.Run{{Name: "c-apply-1", Operation: "apply", Attempt: 1, Phase: v1alpha1.RunRunning, StartTime: at(7)}}
		}, []sample{{"queue", common, 7}}},
		{"a stage seen before is not observed again", func(b, a *v1alpha1.Fulfillment) {
			b.Status.Stages.ApplyStarted, a.Status.Stages.ApplyStarted = at(7), at(7)
		}, nil},
		{"failed run ends and is retried", func(b, a *v1alpha1.Fulfillment) {
			b.Status.Runs = []v1alpha1.Run{{Name: "c-apply-1", Operation: "apply", Attempt: 1, Phase: v1alpha1.RunRunning, StartTime: at(7)}}
			a.Status.Runs = []v1alpha1.Run{
				{Name: "c-apply-1", Operation: "apply", Attempt: 1, Phase: v1alpha1.RunFailed, ErrorClass: "RateLimited", StartTime: at(7), CompletionTime: at(37)},
				{Name: "c-apply-2", Operation: "apply", Attempt: 2, Phase: v1alpha1.RunRunning, StartTime: at(40)},
			}
		}, []sample{
			{"runs", with(common, "operation", "apply", "result", "Failed", "error_class", "RateLimited"), 1},
			{"run", with(common, "operation", "apply", "result", "Failed"), 30},
			{"retries", with(common, "operation", "apply"), 1},
		}},
		{"an ended run is counted once", func(b, a *v1alpha1.Fulfillment) {
			r := v1alpha1.Run{Name: "c-apply-1", Operation: "apply", Attempt: 1, Phase: v1alpha1.RunSucceeded, StartTime: at(7), CompletionTime: at(37)}
			b.Status.Runs, a.Status.Runs = []v1alpha1.Run{r}, []v1alpha1.Run{r}
		}, nil},
		{"registered and initialized in one write", func(_, a *v1alpha1.Fulfillment) {
			a.Status.Stages.Registered, a.Status.Stages.Initialized = at(90), at(120)
		}, []sample{{"registration", common, 90}, {"initialization", common, 30}}},
		{"token minted", func(_, a *v1alpha1.Fulfillment) {
			a.Status.TokenID = "abc123"
		}, []sample{{"tokens", with(common, "event", "minted"), 1}}},
		{"the Node registered: its token is revoked", func(b, a *v1alpha1.Fulfillment) {
			b.Status.TokenID, a.Status.TokenID = "abc123", "abc123"
			b.Status.Conditions = []status.Condition{{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonJoining}}
			a.Status.Conditions = []status.Condition{{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonJoined}}
		}, []sample{{"tokens", with(common, "event", "revoked"), 1}}},
		{"a boot stage is counted when it first shows", func(b, a *v1alpha1.Fulfillment) {
			b.Status.Conditions = []status.Condition{{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonAwaitingNode}}
			a.Status.Conditions = []status.Condition{{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonInstalling}}
		}, []sample{{"reports", with(common, "stage", "Installing"), 1}}},
		{"a boot stage seen again counts nothing", func(b, a *v1alpha1.Fulfillment) {
			c := status.Condition{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonInstalling}
			b.Status.Conditions, a.Status.Conditions = []status.Condition{c}, []status.Condition{c}
		}, nil},
		{"a failed boot step", func(b, a *v1alpha1.Fulfillment) {
			b.Status.Conditions = []status.Condition{{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonInstalling}}
			a.Status.Conditions = []status.Condition{{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonBootstrapFailed}}
		}, []sample{{"reports", with(common, "stage", "Failed"), 1}}},
		{"a run waits for a held lock once", func(b, a *v1alpha1.Fulfillment) {
			a.Status.LockHolder = &v1alpha1.LockHolder{Who: "runner@pod", ID: "lock-1"}
		}, []sample{{"lockwaits", common, 1}}},
		{"a lock still held counts nothing", func(b, a *v1alpha1.Fulfillment) {
			b.Status.LockHolder = &v1alpha1.LockHolder{Who: "runner@pod", ID: "lock-1"}
			a.Status.LockHolder = &v1alpha1.LockHolder{Who: "runner@pod", ID: "lock-1"}
		}, nil},
		{"destroyed", func(b, a *v1alpha1.Fulfillment) {
			b.Status.Stages.DestroyStarted, a.Status.Stages.DestroyStarted, a.Status.Stages.Destroyed = at(500), at(500), at(545)
			a.Status.Runs = []v1alpha1.Run{{Name: "c-destroy-1", Operation: "destroy", Attempt: 1, Phase: v1alpha1.RunSucceeded, StartTime: at(501), CompletionTime: at(544)}}
		}, []sample{
			{"destroy", common, 45},
			{"runs", with(common, "operation", "destroy", "result", "Succeeded", "error_class", ""), 1},
			{"run", with(common, "operation", "destroy", "result", "Succeeded"), 43},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, after := base(), base()
			c.change(before, after)
			got := observeChanges(before, after, "hcloud")
			if len(got) != len(c.want) {
				t.Fatalf("got %d samples, want %d: %+v", len(got), len(c.want), got)
			}
			for i, w := range c.want {
				g := got[i]
				if name(g) != w.metric || g.value != w.value || len(g.labels) != len(w.labels) {
					t.Errorf("sample %d: got %s=%v %v, want %s=%v %v", i, name(g), g.value, g.labels, w.metric, w.value, w.labels)
					continue
				}
				for k, v := range w.labels {
					if g.labels[k] != v {
						t.Errorf("sample %d: label %s=%q, want %q", i, k, g.labels[k], v)
					}
				}
			}
		})
	}
}
