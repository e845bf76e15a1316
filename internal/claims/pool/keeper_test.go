// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/family/fake"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestPoolKeeper: the keeper writes what the pool reports as PoolReady (Ready is not
// composed of it), publishes its events once, and tells it which claims live.
func TestPoolKeeper(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	pool := fake.NewPool("m1", "m2")
	families, err := family.NewRegistry(pool)
	if err != nil {
		t.Fatal(err)
	}
	nc := test.NodeClass("sim", func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Family = "fakepool" })
	test.Ready(nc)
	// A live claim, leased a machine by Create and recorded; and the lease of a claim that is
	// gone.
	claim := test.NodeClaim("sim-aaaaa", "sim", clk.Now())
	kube := test.NewClient(nil, nc, claim, test.Fulfillment(claim, clk.Now()))
	for _, c := range []family.PoolClaim{{Name: claim.Name, UID: string(claim.UID), NodeType: "small"}, {Name: "sim-gone1", UID: "gone-uid", NodeType: "small"}} {
		if _, err := pool.Lease(ctx, family.Scope{}, c); err != nil {
			t.Fatal(err)
		}
	}
	pool.Report = family.PoolReport{Reason: v1alpha1.ReasonServersQuarantined, Message: "server m9 (NotInStandby: failed 2 times in a row)",
		Events: []family.PoolEvent{{Warning: true, Reason: v1alpha1.ReasonServerQuarantined, Message: "server m9 is quarantined"}}}
	events := &test.Recorder{}
	k := NewKeeper(Options{Kube: kube, APIReader: kube, Clock: clk, Recorder: events, Families: families,
		SecretNamespace: "fulfiller", StateNamespace: "fulfiller", Cluster: "test", Interval: time.Second})
	if err := k.KeepAll(ctx); err != nil {
		t.Fatal(err)
	}
	got := test.ExpectExists(t, kube, test.NodeClass("sim"))
	c := test.ExpectCondition(t, got, v1alpha1.ConditionPoolReady, metav1.ConditionFalse, v1alpha1.ReasonServersQuarantined)
	if !strings.Contains(c.Message, "m9") || !got.StatusConditions().Root().IsTrue() {
		t.Errorf("PoolReady %+v, Ready %+v", c, got.StatusConditions().Root())
	}
	if reasons := events.Reasons(); !slices.Equal(reasons, []string{v1alpha1.ReasonServerQuarantined}) {
		t.Errorf("events %v", reasons)
	}
	held := pool.Held()
	if _, ok := held["sim-gone1/gone-uid"]; ok {
		t.Errorf("the lease of a claim that is gone was kept")
	}
	if _, ok := held[claim.Name+"/"+string(claim.UID)]; !ok {
		t.Errorf("the lease of a live claim was released")
	}

	pool.Report = family.PoolReport{Healthy: true, Reason: v1alpha1.ReasonPoolHealthy, Message: "2 servers",
		Machines: map[string]int{family.PoolFree: 0, family.PoolStandby: 1, family.PoolLeased: 1, family.PoolQuarantined: 0}}
	if err := k.KeepAll(ctx); err != nil {
		t.Fatal(err)
	}
	test.ExpectCondition(t, test.ExpectExists(t, kube, test.NodeClass("sim")), v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPoolHealthy)
	// The pool's machines by state, as the last round counted them; none once the class is gone.
	const help = `
# HELP fulfiller_pool_machines Machines of a class's finite pool (Hetzner Robot servers) by state: free (to be installed), standby (installed ahead of need), leased (to a claim), quarantined (out of service until cleared); as the keeper found them in its last round.
# TYPE fulfiller_pool_machines gauge
`
	want := help + `fulfiller_pool_machines{class="sim",family="fakepool",state="free"} 0
fulfiller_pool_machines{class="sim",family="fakepool",state="leased"} 1
fulfiller_pool_machines{class="sim",family="fakepool",state="quarantined"} 0
fulfiller_pool_machines{class="sim",family="fakepool",state="standby"} 1
`
	if err := testutil.CollectAndCompare(poolMachines, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if err := kube.Delete(ctx, test.NodeClass("sim")); err != nil {
		t.Fatal(err)
	}
	if err := k.KeepAll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(poolMachines); n != 0 {
		t.Errorf("%d series of fulfiller_pool_machines after the class is gone", n)
	}
}
