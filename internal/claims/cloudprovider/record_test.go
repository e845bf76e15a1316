// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"context"
	"testing"

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

// recordPath stands between the provider and the API server: Fulfillment creates fail with
// the errors queued in fail (after before runs), and while stale the cache does not show
// Fulfillments.
type recordPath struct {
	creates int
	fail    []error
	before  func(ctx context.Context, c client.WithWatch)
	stale   bool
}

func (p *recordPath) provider(e *env) *CloudProvider {
	kube := interceptor.NewClient(e.kube, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*v1alpha1.Fulfillment); !ok {
				return c.Create(ctx, obj, opts...)
			}
			p.creates++
			if p.before != nil {
				p.before(ctx, c)
			}
			if len(p.fail) > 0 {
				err := p.fail[0]
				p.fail = p.fail[1:]
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.Fulfillment); ok && p.stale {
				return apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.Group, Resource: "fulfillments"}, key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	return New(Options{Kube: kube, APIReader: e.kube, Clock: e.clock, Unavailable: e.unavailable, StateNamespace: testNamespace})
}

// TestCreateWritesBeforeAnswer: Create answers only once the claim's record, its
// Fulfillment, is written: Karpenter does not call Create again for a launched claim, and
// only the record makes a machine for it.
func TestCreateWritesBeforeAnswer(t *testing.T) {
	fulfillmentOf := func(e *env, claim *karpv1.NodeClaim) (*v1alpha1.Fulfillment, error) {
		f := &v1alpha1.Fulfillment{}
		return f, e.kube.Get(e.ctx, client.ObjectKeyFromObject(claim), f)
	}
	t.Run("a write that fails is no answer, and the next Create writes it", func(t *testing.T) {
		e := newEnv(t)
		w := &recordPath{fail: []error{apierrors.NewTooManyRequests("busy", 1)}}
		p := w.provider(e)
		claim := test.NodeClaim("sim-w1", "sim", e.clock.Now())
		test.ExpectApplied(t, e.kube, claim)
		if got, err := p.Create(e.ctx, claim); err == nil || got != nil {
			t.Fatalf("Create answered %v without its record (err %v)", got, err)
		}
		if _, err := fulfillmentOf(e, claim); !apierrors.IsNotFound(err) {
			t.Fatalf("fulfillment after a failed write: %v", err)
		}
		got, err := p.Create(e.ctx, claim)
		if err != nil {
			t.Fatal(err)
		}
		f, err := fulfillmentOf(e, claim)
		if err != nil || f.Spec.NodeClaimUID != string(claim.UID) || f.Spec.ProviderID != got.Status.ProviderID {
			t.Errorf("record %+v (%v), answer %q", f.Spec, err, got.Status.ProviderID)
		}
		if w.creates != 2 {
			t.Errorf("%d writes, want 2", w.creates)
		}
	})
	t.Run("a repeated Create while the cache does not show the record answers from the written one", func(t *testing.T) {
		e := newEnv(t)
		w := &recordPath{stale: true}
		p := w.provider(e)
		claim := test.NodeClaim("sim-w2", "sim", e.clock.Now())
		test.ExpectApplied(t, e.kube, claim)
		first, err := p.Create(e.ctx, claim)
		if err != nil {
			t.Fatal(err)
		}
		// The class changes between the calls: the answer is the record's, not a new decision.
		nc := test.ExpectExists(t, e.kube, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"}})
		nc.Spec.NodeTypes[0].Offerings = []v1alpha1.Offering{{Zone: "a", Price: "0.05"}, {Zone: "b", Price: "0.01"}}
		test.ExpectApplied(t, e.kube, nc)
		again, err := p.Create(e.ctx, claim)
		if err != nil {
			t.Fatal(err)
		}
		if again.Labels[corev1.LabelTopologyZone] != first.Labels[corev1.LabelTopologyZone] || again.Status.ProviderID != first.Status.ProviderID {
			t.Errorf("second answer %v %q, first %v %q", again.Labels, again.Status.ProviderID, first.Labels, first.Status.ProviderID)
		}
		list := &v1alpha1.FulfillmentList{}
		if err := e.kube.List(e.ctx, list); err != nil || len(list.Items) != 1 {
			t.Errorf("%d fulfillments (%v), want 1", len(list.Items), err)
		}
	})
	t.Run("an earlier claim's record appearing before the write is a conflict, and stays", func(t *testing.T) {
		e := newEnv(t)
		claim := test.NodeClaim("sim-w3", "sim", e.clock.Now())
		w := &recordPath{before: func(ctx context.Context, c client.WithWatch) {
			earlier := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim.Name},
				Spec: v1alpha1.FulfillmentSpec{NodeClaimUID: "uid-earlier", NodeClass: "sim"}}
			_ = c.Create(ctx, earlier)
		}}
		p := w.provider(e)
		test.ExpectApplied(t, e.kube, claim)
		_, err := p.Create(e.ctx, claim)
		expectCreateError(t, err, v1alpha1.ReasonFulfillmentConflict)
		if f, err := fulfillmentOf(e, claim); err != nil || f.Spec.NodeClaimUID != "uid-earlier" {
			t.Errorf("the earlier claim's record: %+v (%v)", f.Spec, err)
		}
	})
	t.Run("a record the API server refuses is no answer", func(t *testing.T) {
		e := newEnv(t)
		w := &recordPath{fail: []error{apierrors.NewInvalid(schema.GroupKind{Group: v1alpha1.Group, Kind: "Fulfillment"}, "sim-w4", nil)}}
		p := w.provider(e)
		claim := test.NodeClaim("sim-w4", "sim", e.clock.Now())
		test.ExpectApplied(t, e.kube, claim)
		if _, err := p.Create(e.ctx, claim); err == nil || cloudprovider.IsNodeClassNotReadyError(err) {
			t.Errorf("Create: %v, want the write's error", err)
		}
	})
}
