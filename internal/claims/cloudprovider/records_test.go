// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// recordWrites stands between the provider and the API server for Fulfillment creates: it
// holds each one until released, or fails it with the errors queued in fail.
type recordWrites struct {
	mu      sync.Mutex
	calls   int
	fail    []error
	release chan struct{} // nil: writes go through at once
	before  func(ctx context.Context, c client.WithWatch)
}

func (w *recordWrites) create(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*v1alpha1.Fulfillment); !ok {
		return c.Create(ctx, obj, opts...)
	}
	w.mu.Lock()
	w.calls++
	var err error
	if len(w.fail) > 0 {
		err, w.fail = w.fail[0], w.fail[1:]
	}
	release, before := w.release, w.before
	w.mu.Unlock()
	if release != nil {
		<-release
	}
	if before != nil {
		before(ctx, c)
	}
	if err != nil {
		return err
	}
	return c.Create(ctx, obj, opts...)
}

func (w *recordWrites) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// asyncProvider is e's provider with records written after the answer, through w.
func asyncProvider(e *env, w *recordWrites) *CloudProvider {
	kube := interceptor.NewClient(e.kube.(client.WithWatch), interceptor.Funcs{Create: w.create})
	return New(Options{Kube: kube, Clock: e.clock, Unavailable: e.unavailable, StateNamespace: testNamespace, RecordsAfterAnswer: true})
}

// createAsync makes the claim and calls Create through a provider whose records are
// written through w, which must answer.
func createAsync(t *testing.T, e *env, w *recordWrites, name string) (*CloudProvider, *karpv1.NodeClaim, *karpv1.NodeClaim) {
	t.Helper()
	p := asyncProvider(e, w)
	claim := test.NodeClaim(name, "sim", e.clock.Now())
	test.ExpectApplied(t, e.kube, claim)
	answer, err := p.Create(e.ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	return p, claim, answer
}

// eventually waits (real time: the writes are goroutines) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fulfillmentExists(e *env, name string) (*v1alpha1.Fulfillment, bool) {
	f := &v1alpha1.Fulfillment{}
	err := e.kube.Get(e.ctx, client.ObjectKey{Name: name}, f)
	return f, err == nil
}

// TestRecordsAfterAnswer: Create answers before its record is written; nothing is lost or
// made twice whatever happens to the write.
func TestRecordsAfterAnswer(t *testing.T) {
	t.Run("Create answers before the write, and again from the record until the cache has it", func(t *testing.T) {
		e := newEnv(t)
		w := &recordWrites{release: make(chan struct{})}
		p, claim, first := createAsync(t, e, w, "sim-a1")
		if first.Status.ProviderID != "fake://sim-a1" || first.Labels[corev1.LabelInstanceTypeStable] != "small" {
			t.Errorf("answer %q %v", first.Status.ProviderID, first.Labels)
		}
		if _, ok := fulfillmentExists(e, claim.Name); ok {
			t.Fatal("the record was written before the write was let through")
		}
		again, err := p.Create(e.ctx, claim)
		if err != nil || again.Status.ProviderID != first.Status.ProviderID {
			t.Fatalf("second Create: %v, %v", again, err)
		}
		close(w.release)
		eventually(t, "the record", func() bool { _, ok := fulfillmentExists(e, claim.Name); return ok })
		f, _ := fulfillmentExists(e, claim.Name)
		if f.Spec.NodeClaimUID != string(claim.UID) || f.Spec.NodeType != "small" || f.Spec.ProviderID != "fake://sim-a1" || f.Spec.Settings == nil {
			t.Errorf("record %+v", f.Spec)
		}
		eventually(t, "the record to be forgotten once the cache has it", func() bool { return !p.records.has(claim.Name) })
		if w.count() != 1 {
			t.Errorf("%d writes, want 1", w.count())
		}
	})
	t.Run("a failed write is retried", func(t *testing.T) {
		e := newEnv(t)
		busy := apierrors.NewTooManyRequests("busy", 0)
		w := &recordWrites{fail: []error{busy, busy}}
		_, claim, _ := createAsync(t, e, w, "sim-a2")
		eventually(t, "the record", func() bool { _, ok := fulfillmentExists(e, claim.Name); return ok })
		if w.count() != 3 {
			t.Errorf("%d writes, want 3", w.count())
		}
	})
	t.Run("Delete before the write lands: the record written meanwhile is deleted", func(t *testing.T) {
		e := newEnv(t)
		w := &recordWrites{release: make(chan struct{})}
		p, claim, _ := createAsync(t, e, w, "sim-a3")
		eventually(t, "the write to be on its way", func() bool { return w.count() == 1 })
		if err := p.Delete(e.ctx, claim); !cloudprovider.IsNodeClaimNotFoundError(err) {
			t.Fatalf("Delete before the write: %v, want NodeClaimNotFound", err)
		}
		close(w.release)
		eventually(t, "the written record to be deleted", func() bool {
			f, ok := fulfillmentExists(e, claim.Name)
			return ok && !f.DeletionTimestamp.IsZero()
		})
	})
	t.Run("an earlier claim's Fulfillment of the same name: the claim is replaced", func(t *testing.T) {
		e := newEnv(t)
		claim := test.NodeClaim("sim-a4", "sim", e.clock.Now())
		w := &recordWrites{before: func(ctx context.Context, c client.WithWatch) {
			// The earlier claim's record appears between Create's look and the write.
			earlier := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim.Name}, Spec: v1alpha1.FulfillmentSpec{NodeClaimUID: "uid-earlier", NodeClass: "sim"}}
			_ = c.Create(ctx, earlier)
		}}
		p := asyncProvider(e, w)
		test.ExpectApplied(t, e.kube, claim)
		if _, err := p.Create(e.ctx, claim); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the claim to be deleted", func() bool {
			err := e.kube.Get(e.ctx, client.ObjectKeyFromObject(claim), &karpv1.NodeClaim{})
			return apierrors.IsNotFound(err)
		})
		if f, _ := fulfillmentExists(e, claim.Name); f.Spec.NodeClaimUID != "uid-earlier" {
			t.Errorf("the earlier claim's record was replaced: %+v", f.Spec)
		}
	})
	t.Run("a write the API server refuses for good: the claim is replaced", func(t *testing.T) {
		e := newEnv(t)
		invalid := apierrors.NewInvalid(schema.GroupKind{Group: v1alpha1.Group, Kind: "Fulfillment"}, "sim-a5", nil)
		w := &recordWrites{fail: []error{invalid}}
		_, claim, _ := createAsync(t, e, w, "sim-a5")
		eventually(t, "the claim to be deleted", func() bool {
			err := e.kube.Get(e.ctx, client.ObjectKeyFromObject(claim), &karpv1.NodeClaim{})
			return apierrors.IsNotFound(err)
		})
		if _, ok := fulfillmentExists(e, claim.Name); ok || w.count() != 1 {
			t.Errorf("a refused record was written or retried (%d writes)", w.count())
		}
	})
}

// TestRecordRecovery: a launched claim whose record was lost with the process gets it back
// from what Karpenter stored on it; other claims are left alone.
func TestRecordRecovery(t *testing.T) {
	launched := func(e *env, name string, ago time.Duration, opts ...func(*karpv1.NodeClaim)) *karpv1.NodeClaim {
		claim := test.NodeClaim(name, "sim", e.clock.Now().Add(-ago))
		claim.Labels[corev1.LabelInstanceTypeStable] = "small"
		claim.Labels[corev1.LabelTopologyZone] = "a"
		claim.Labels[karpv1.CapacityTypeLabelKey] = karpv1.CapacityTypeOnDemand
		claim.Status.ProviderID = "fake://" + name
		claim.Status.Conditions = []status.Condition{{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue, Reason: "Launched",
			LastTransitionTime: metav1.NewTime(e.clock.Now().Add(-ago))}}
		test.ExpectApplied(e.t, e.kube, claim)
		for _, o := range opts { // after: the API server would not take a deletion timestamp
			o(claim)
		}
		return claim
	}
	t.Run("the record is written from the claim, as Create would have", func(t *testing.T) {
		e := newEnv(t)
		p := New(Options{Kube: e.kube, Clock: e.clock, Unavailable: e.unavailable, StateNamespace: testNamespace, RecordsAfterAnswer: true})
		r := NewRecordRecovery(p, e.clock)
		claim := launched(e, "sim-r1", 10*time.Second)
		if res, err := r.Reconcile(e.ctx, claim); err != nil || res.RequeueAfter != 20*time.Second {
			t.Fatalf("within the grace: %+v, %v; want a look again after 20s", res, err)
		}
		if _, ok := fulfillmentExists(e, claim.Name); ok {
			t.Fatal("recorded within the grace")
		}
		e.clock.Step(20 * time.Second)
		if _, err := r.Reconcile(e.ctx, claim); err != nil {
			t.Fatal(err)
		}
		got, ok := fulfillmentExists(e, claim.Name)
		if !ok {
			t.Fatal("no record written")
		}
		// What Create records for the same claim.
		want := e.create(test.NodeClaim("sim-r1x", "sim", e.clock.Now()))
		wantF := e.fulfillment(want.Name)
		if got.Spec.NodeType != wantF.Spec.NodeType || got.Spec.Zone != wantF.Spec.Zone || got.Spec.CapacityType != wantF.Spec.CapacityType ||
			got.Spec.Price != wantF.Spec.Price || got.Spec.Hash != wantF.Spec.Hash || got.Spec.Module != wantF.Spec.Module ||
			got.Spec.ProviderID != "fake://sim-r1" || got.Spec.NodeClaimUID != string(claim.UID) || got.Spec.Settings == nil {
			t.Errorf("recovered %+v\nCreate records %+v", got.Spec, wantF.Spec)
		}
		// Once there, nothing more.
		if _, err := r.Reconcile(e.ctx, claim); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name string
		opt  func(*karpv1.NodeClaim)
	}{
		{"registered", func(c *karpv1.NodeClaim) {
			c.Status.Conditions = append(c.Status.Conditions, status.Condition{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue, Reason: "Registered"})
		}},
		{"being deleted", func(c *karpv1.NodeClaim) {
			c.Finalizers = []string{karpv1.TerminationFinalizer}
			now := metav1.Now()
			c.DeletionTimestamp = &now
		}},
		{"of another provider's class", func(c *karpv1.NodeClaim) { c.Spec.NodeClassRef.Group = "karpenter.kwok.sh" }},
		{"with a provider ID the node type does not predict", func(c *karpv1.NodeClaim) { c.Status.ProviderID = "hcloud://42" }},
		{"of a node type gone from the class", func(c *karpv1.NodeClaim) { c.Labels[corev1.LabelInstanceTypeStable] = "gone" }},
	} {
		t.Run("left alone: "+tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := New(Options{Kube: e.kube, Clock: e.clock, Unavailable: e.unavailable, StateNamespace: testNamespace, RecordsAfterAnswer: true})
			claim := launched(e, "sim-r2", time.Minute, tc.opt)
			if _, err := NewRecordRecovery(p, e.clock).Reconcile(e.ctx, claim); err != nil {
				t.Fatal(err)
			}
			if _, ok := fulfillmentExists(e, claim.Name); ok {
				t.Error("a record was written")
			}
		})
	}
	t.Run("left alone: a record still being written", func(t *testing.T) {
		e := newEnv(t)
		w := &recordWrites{release: make(chan struct{})}
		p, _, claim := createAsync(t, e, w, "sim-r3")
		claim.Status.Conditions = []status.Condition{{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue, Reason: "Launched",
			LastTransitionTime: metav1.NewTime(e.clock.Now().Add(-time.Minute))}}
		if _, err := NewRecordRecovery(p, e.clock).Reconcile(e.ctx, claim); err != nil {
			t.Fatal(err)
		}
		close(w.release)
		eventually(t, "the record", func() bool { _, ok := fulfillmentExists(e, claim.Name); return ok })
		if w.count() != 1 {
			t.Errorf("%d writes, want the one Create started", w.count())
		}
	})
}
