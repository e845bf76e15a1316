// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"strings"
	"testing"

	familyfake "github.com/fulfiller-sh/fulfiller/internal/family/fake"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// poolEnv is a world whose class "sim" is of the fake pool's family, with machines.
func poolEnv(t *testing.T, machines ...string) (*env, *familyfake.Pool) {
	pool := familyfake.NewPool(machines...)
	families, err := family.NewRegistry(pool)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	nc := test.ExpectExists(t, e.kube, test.NodeClass("sim"))
	nc.Spec.Family = "fakepool"
	nc.Spec.NodeTypes[0].ProviderIDTemplate = ""
	test.ExpectApplied(t, e.kube, nc)
	e.rebuild(func(o *Options) { o.Families = families })
	return e, pool
}

// TestPoolLeaseAndRelease: Create leases a machine and records it on the Fulfillment (its
// parameters reach the module, its provider ID is the claim's); a burst larger than the pool
// gets insufficient capacity with the pool's reason and the offering marked unavailable; the
// destroy gives the machine back, once.
func TestPoolLeaseAndRelease(t *testing.T) {
	e, pool := poolEnv(t, "m1")
	nodePool := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	nodePool.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Name: "sim"}
	its, err := e.provider.GetInstanceTypes(e.ctx, nodePool)
	if err != nil || len(its) != 1 || len(its[0].Offerings.Available()) != 1 {
		t.Fatalf("instance types with a free machine: %v, %v", its, err)
	}

	claim := test.NodeClaim("sim-aaaaa", "sim", e.clock.Now())
	got := e.create(claim)
	if got.Status.ProviderID != "pool://m1" {
		t.Fatalf("provider id %q, want the leased machine's", got.Status.ProviderID)
	}
	f := e.fulfillment(claim.Name)
	if f.Spec.Parameters["server_number"] != "m1" || f.Spec.ProviderID != "pool://m1" {
		t.Fatalf("fulfillment spec %+v", f.Spec)
	}
	if s := pool.Scopes()[len(pool.Scopes())-1]; s.StateNamespace != testNamespace || s.Reader == nil || s.Writer == nil || s.Class.Name != "sim" {
		t.Errorf("scope %+v", s)
	}
	// Create again (a restarted Karpenter): the same machine, nothing leased twice.
	if again := e.create(claim); again.Status.ProviderID != "pool://m1" || len(pool.Held()) != 1 {
		t.Errorf("create again: %q, held %v", again.Status.ProviderID, pool.Held())
	}

	// The pool is empty: its types are not offered, and a claim of the burst is refused.
	its, err = e.provider.GetInstanceTypes(e.ctx, nodePool)
	if err != nil || len(its[0].Offerings.Available()) != 0 {
		t.Fatalf("instance types with no free machine: available %d, %v", len(its[0].Offerings.Available()), err)
	}
	second := test.NodeClaim("sim-bbbbb", "sim", e.clock.Now())
	test.ExpectApplied(t, e.kube, second)
	_, err = e.provider.Create(e.ctx, second)
	if !cloudprovider.IsInsufficientCapacityError(err) || !strings.Contains(err.Error(), v1alpha1.ReasonPoolExhausted) {
		t.Fatalf("create beyond the pool: %v, want insufficient capacity with PoolExhausted", err)
	}
	test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: second.Name}})

	// The apply gets the lease's parameters over the class's variables.
	e.exec.Script(claim.Name+"-apply-1", fake.Outcome{ProviderID: "pool://m1"})
	e.reconcile(claim.Name)
	req, _ := e.exec.Request(claim.Name + "-apply-1")
	params, _ := req.Variables[tfrunner.VarParameters].(map[string]string)
	if params["server_number"] != "m1" || params["lease_holder"] != claim.Name+"/"+string(claim.UID) {
		t.Errorf("apply parameters %v", params)
	}
	e.reconcile(claim.Name)
	e.expectCondition(claim.Name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
	e.writeState(claim.Name)

	// Delete: destroy, then the machine goes back to the pool before the Fulfillment lets go.
	if err := e.provider.Delete(e.ctx, claim); err != nil {
		t.Fatal(err)
	}
	e.reconcile(claim.Name)
	if len(pool.Released()) != 0 {
		t.Fatalf("released %v while the destroy runs", pool.Released())
	}
	e.reconcile(claim.Name)
	test.ExpectNotFound(t, e.kube, f)
	if len(pool.Released()) != 1 || pool.Released()[0] != "m1" || len(pool.Free()) != 1 {
		t.Errorf("released %v, free %v", pool.Released(), pool.Free())
	}
}
