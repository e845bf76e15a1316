// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

func TestInventorySamples(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	claim := func(pool, typ, price, phase string, appliedAgo time.Duration, running string) v1alpha1.Fulfillment {
		f := v1alpha1.Fulfillment{Spec: v1alpha1.FulfillmentSpec{NodePool: pool, NodeType: typ, CapacityType: "on-demand", Zone: "fsn1", NodeClass: "hcloud", Price: price}}
		f.Status.Phase, f.Status.Reason, _ = strings.Cut(phase, "/")
		if appliedAgo > 0 {
			a := metav1.NewTime(now.Add(-appliedAgo))
			f.Status.Stages.Applied = &a
		}
		if running != "" {
			f.Status.Runs = []v1alpha1.Run{{Name: "r", Operation: running, Phase: v1alpha1.RunRunning}}
		}
		return f
	}
	fs := []v1alpha1.Fulfillment{
		claim("default", "cx22", "0.0071", "Ready", 2*time.Hour, ""),
		claim("default", "cx22", "0.0071", "Ready", 30*time.Minute, ""),
		claim("default", "cx32", "0.0127", "Applying", 0, "apply"),
		claim("gpu", "ax102", "0.1562", "Deleting", 10*time.Hour, "destroy"),
		claim("gpu", "ax102", "not a price", "Pending/WaitingForAPIBudget", 0, ""),
		claim("default", "cx22", "0.0071", "Pending/WaitingForRunner", 0, ""),
		claim("default", "cx22", "0.0071", "Pending/WaitingForRunner", 0, ""),
	}
	// The two Ready cx22 claims are of a class with the billing-aware scale-down: one held.
	fs[0].Status.Conditions = []status.Condition{{Type: v1alpha1.ConditionScaleDownHeld, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonHeldForPaidPeriod}}
	fs[1].Status.Conditions = []status.Condition{{Type: v1alpha1.ConditionScaleDownHeld, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotEmpty}}
	got := map[string]float64{}
	for _, s := range inventorySamples(fs, map[string]string{"hcloud": "hcloud"}, now) {
		name := s.desc.String()
		name = name[strings.Index(name, `"`)+1:]
		name = name[:strings.Index(name, `"`)]
		got[name+"{"+strings.Join(s.values, ",")+"}"] = s.value
	}
	want := map[string]float64{
		"fulfiller_nodeclaims{default,cx22,on-demand,fsn1,hcloud,hcloud,Ready}":                    2,
		"fulfiller_nodeclaims{default,cx22,on-demand,fsn1,hcloud,hcloud,Pending}":                  2,
		"fulfiller_nodeclaims_waiting{default,cx22,on-demand,fsn1,hcloud,hcloud,WaitingForRunner}": 2,
		"fulfiller_nodeclaims_waiting{gpu,ax102,on-demand,fsn1,hcloud,hcloud,WaitingForAPIBudget}": 1,
		"fulfiller_nodeclaims{default,cx32,on-demand,fsn1,hcloud,hcloud,Applying}":                 1,
		"fulfiller_nodeclaims{gpu,ax102,on-demand,fsn1,hcloud,hcloud,Deleting}":                    1,
		"fulfiller_nodeclaims{gpu,ax102,on-demand,fsn1,hcloud,hcloud,Pending}":                     1,
		"fulfiller_nodeclaim_hourly_cost{default,cx22,on-demand,fsn1,hcloud,hcloud}":               0.0284,
		"fulfiller_nodeclaim_hourly_cost{default,cx32,on-demand,fsn1,hcloud,hcloud}":               0.0127,
		"fulfiller_nodeclaim_hourly_cost{gpu,ax102,on-demand,fsn1,hcloud,hcloud}":                  0.1562,
		"fulfiller_nodeclaim_cost_accrued{default,cx22,on-demand,fsn1,hcloud,hcloud}":              0.0071*2 + 0.0071*0.5,
		"fulfiller_nodeclaim_cost_accrued{default,cx32,on-demand,fsn1,hcloud,hcloud}":              0,
		"fulfiller_nodeclaim_cost_accrued{gpu,ax102,on-demand,fsn1,hcloud,hcloud}":                 1.562,
		"fulfiller_runs_in_flight{default,cx32,on-demand,fsn1,hcloud,hcloud,apply}":                1,
		"fulfiller_runs_in_flight{gpu,ax102,on-demand,fsn1,hcloud,hcloud,destroy}":                 1,
		"fulfiller_nodeclaims_scale_down_held{default,cx22,on-demand,fsn1,hcloud,hcloud}":          1,
	}
	if len(got) != len(want) {
		t.Errorf("got %d series, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
}
