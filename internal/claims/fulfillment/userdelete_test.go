// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestFulfillmentDeletedByUser: a Fulfillment deleted by someone other than Karpenter goes
// through Karpenter when its claim is launched: the fulfiller deletes the NodeClaim and
// destroys nothing until Karpenter, having drained the node, calls Delete. A claim that never
// launched, or whose NodeClaim is gone, is destroyed at once.
func TestFulfillmentDeletedByUser(t *testing.T) {
	// applied brings a claim to an applied machine with its state; launched says whether
	// Karpenter recorded the provider ID Create returned (with its termination finalizer).
	applied := func(e *env, name string, launched bool) *karpv1.NodeClaim {
		t.Helper()
		claim := test.NodeClaim(name, "sim", e.clock.Now(), func(c *karpv1.NodeClaim) {
			c.Finalizers = []string{karpv1.TerminationFinalizer}
		})
		got := e.create(claim)
		e.reconcile(name)
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
		e.writeState(name)
		live := test.ExpectExists(t, e.kube, claim.DeepCopy())
		if launched {
			live.Status.ProviderID = got.Status.ProviderID
			test.ExpectApplied(t, e.kube, live)
		}
		return live
	}
	userDeletes := func(e *env, name string) {
		t.Helper()
		if err := e.kube.Delete(e.ctx, e.fulfillment(name)); err != nil {
			t.Fatal(err)
		}
	}
	destroys := func(e *env, name string) {
		t.Helper()
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonDestroying)
		e.expectCreated(name+"-apply-1", name+"-destroy-1")
		e.reconcile(name)
		test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}},
			test.Secret(testNamespace, "tfstate-default-"+name, nil))
	}

	t.Run("a launched claim is deleted through Karpenter, and destroyed after its Delete", func(t *testing.T) {
		e := newEnv(t)
		live := applied(e, "sim-user1", true)
		userDeletes(e, live.Name)
		for range 2 {
			e.reconcile(live.Name)
			e.expectCondition(live.Name, v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingNodeClaimDeletion)
			e.expectCreated("sim-user1-apply-1")
		}
		claim := test.ExpectExists(t, e.kube, live.DeepCopy())
		if claim.DeletionTimestamp.IsZero() {
			t.Fatal("the NodeClaim was not deleted")
		}
		// Karpenter drained the node and calls Delete: it is recorded, then the destroy runs.
		if err := e.provider.Delete(e.ctx, claim); err != nil {
			t.Fatal(err)
		}
		if f := e.fulfillment(live.Name); f.Annotations[v1alpha1.AnnotationDeleteCalled] == "" {
			t.Fatalf("Delete did not record that it was called: %v", f.Annotations)
		}
		destroys(e, live.Name)
		if err := e.provider.Delete(e.ctx, claim); !cloudprovider.IsNodeClaimNotFoundError(err) {
			t.Errorf("delete after the destroy: %v, want NodeClaimNotFound", err)
		}
	})
	t.Run("a claim Karpenter has no provider ID for is destroyed at once", func(t *testing.T) {
		e := newEnv(t)
		live := applied(e, "sim-user2", false)
		userDeletes(e, live.Name)
		destroys(e, live.Name)
	})
	t.Run("a claim whose NodeClaim is gone is destroyed at once", func(t *testing.T) {
		e := newEnv(t)
		live := applied(e, "sim-user3", true)
		live.Finalizers = nil
		test.ExpectApplied(t, e.kube, live)
		if err := e.kube.Delete(e.ctx, live); err != nil {
			t.Fatal(err)
		}
		userDeletes(e, live.Name)
		destroys(e, live.Name)
	})
}
