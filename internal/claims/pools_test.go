// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/fake"
)

// fakePool is a finite pool of machines "m1".."mN" of the type "small", leased to claims by
// name/uid, as family.Pool asks; it records what it was asked.
type fakePool struct {
	mu       sync.Mutex
	free     []string
	held     map[string]string // holder -> machine
	released []string
	report   family.PoolReport
	scopes   []family.Scope
}

func (p *fakePool) Name() string { return "fakepool" }

func (p *fakePool) Offer(_ context.Context, s family.Scope) (map[string]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scopes = append(p.scopes, s)
	return map[string]int{"small": len(p.free)}, nil
}

func (p *fakePool) Lease(_ context.Context, s family.Scope, c family.PoolClaim) (family.PoolLease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scopes = append(p.scopes, s)
	holder := c.Name + "/" + c.UID
	m, ok := p.held[holder]
	if !ok {
		if len(p.free) == 0 {
			return family.PoolLease{}, fmt.Errorf("%w: type %s has none in standby", family.ErrPoolExhausted, c.NodeType)
		}
		m, p.free = p.free[0], p.free[1:]
		p.held[holder] = m
	}
	return family.PoolLease{Parameters: map[string]string{"server_number": m, "lease_holder": holder}, ProviderID: "pool://" + m}, nil
}

func (p *fakePool) Release(_ context.Context, _ family.Scope, c family.PoolClaim) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	holder := c.Name + "/" + c.UID
	if m, ok := p.held[holder]; ok {
		delete(p.held, holder)
		p.free = append(p.free, m)
		p.released = append(p.released, m)
	}
	return nil
}

func (p *fakePool) Keep(ctx context.Context, _ family.Scope, live func(context.Context, string, string) (bool, error)) (family.PoolReport, error) {
	p.mu.Lock()
	holders := make([]string, 0, len(p.held))
	for h := range p.held {
		holders = append(holders, h)
	}
	p.mu.Unlock()
	for _, h := range holders {
		name, uid, _ := strings.Cut(h, "/")
		ok, err := live(ctx, name, uid)
		if err != nil {
			return family.PoolReport{}, err
		}
		if !ok {
			_ = p.Release(ctx, family.Scope{}, family.PoolClaim{Name: name, UID: uid})
		}
	}
	return p.report, nil
}

// poolEnv is a world whose class "sim" is of the fake pool's family, with machines.
func poolEnv(t *testing.T, machines ...string) (*env, *fakePool) {
	pool := &fakePool{free: machines, held: map[string]string{}}
	families, err := family.NewRegistry(pool)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	nc := test.ExpectExists(t, e.kube, test.NodeClass("sim"))
	nc.Spec.Family = "fakepool"
	nc.Spec.NodeTypes[0].ProviderIDTemplate = ""
	test.ExpectApplied(t, e.kube, nc)
	e.controller = NewFulfillmentController(e.kube, e.kube, e.clock, e.events, e.exec, e.unavailable,
		Options{Namespace: testNamespace, StateNamespace: testNamespace, TofuPath: "/bin/tofu", Families: families})
	e.provider = NewCloudProvider(e.kube, e.clock, e.unavailable).WithPools(families, e.kube, e.kube, testNamespace)
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
	if s := pool.scopes[len(pool.scopes)-1]; s.StateNamespace != testNamespace || s.Reader == nil || s.Writer == nil || s.Class.Name != "sim" {
		t.Errorf("scope %+v", s)
	}
	// Create again (a restarted Karpenter): the same machine, nothing leased twice.
	if again := e.create(claim); again.Status.ProviderID != "pool://m1" || len(pool.held) != 1 {
		t.Errorf("create again: %q, held %v", again.Status.ProviderID, pool.held)
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
	if len(pool.released) != 0 {
		t.Fatalf("released %v while the destroy runs", pool.released)
	}
	e.reconcile(claim.Name)
	test.ExpectNotFound(t, e.kube, f)
	if len(pool.released) != 1 || pool.released[0] != "m1" || len(pool.free) != 1 {
		t.Errorf("released %v, free %v", pool.released, pool.free)
	}
}

// TestPoolKeeper: the keeper writes what the pool reports as PoolReady (Ready is not
// composed of it), publishes its events once, and tells it which claims live.
func TestPoolKeeper(t *testing.T) {
	e, pool := poolEnv(t, "m1", "m2")
	claim := test.NodeClaim("sim-aaaaa", "sim", e.clock.Now())
	e.create(claim)
	gone := family.PoolClaim{Name: "sim-gone1", UID: "gone-uid", NodeType: "small"}
	if _, err := pool.Lease(e.ctx, family.Scope{}, gone); err != nil {
		t.Fatal(err)
	}
	pool.report = family.PoolReport{Reason: v1alpha1.ReasonServersQuarantined, Message: "server m9 (NotInStandby: failed 2 times in a row)",
		Events: []family.PoolEvent{{Warning: true, Reason: v1alpha1.ReasonServerQuarantined, Message: "server m9 is quarantined"}}}
	families, _ := family.NewRegistry(pool)
	k := NewPoolKeeper(e.kube, e.kube, e.clock, e.events, families, testNamespace, testNamespace, "test", pollInterval)
	if err := k.KeepAll(e.ctx); err != nil {
		t.Fatal(err)
	}
	nc := test.ExpectExists(t, e.kube, test.NodeClass("sim"))
	c := test.ExpectCondition(t, nc, v1alpha1.ConditionPoolReady, metav1.ConditionFalse, v1alpha1.ReasonServersQuarantined)
	if !strings.Contains(c.Message, "m9") || !nc.StatusConditions().Root().IsTrue() {
		t.Errorf("PoolReady %+v, Ready %+v", c, nc.StatusConditions().Root())
	}
	e.expectEvents(v1alpha1.ReasonServerQuarantined)
	if _, held := pool.held["sim-gone1/gone-uid"]; held {
		t.Errorf("the lease of a claim that is gone was kept")
	}
	if _, held := pool.held[claim.Name+"/"+string(claim.UID)]; !held {
		t.Errorf("the lease of a live claim was released")
	}

	pool.report = family.PoolReport{Healthy: true, Reason: v1alpha1.ReasonPoolHealthy, Message: "2 servers"}
	if err := k.KeepAll(e.ctx); err != nil {
		t.Fatal(err)
	}
	test.ExpectCondition(t, test.ExpectExists(t, e.kube, test.NodeClass("sim")), v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPoolHealthy)
}
