// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestDestroyedMachineTakesItsNode: a claim whose NodeClaim Karpenter does not map to the
// machine (no provider ID in its status, the case Karpenter's garbage collection leaves) is
// destroyed without Karpenter's termination; its machine had registered a Node, which goes
// with the machine, as a cloud controller manager would remove it. Another machine's Node
// stays.
func TestDestroyedMachineTakesItsNode(t *testing.T) {
	e := newEnv(t)
	const name = "sim-n0d3s"
	claim := test.NodeClaim(name, "sim", e.clock.Now(), func(c *karpv1.NodeClaim) {
		c.Finalizers = []string{karpv1.TerminationFinalizer}
	})
	e.create(claim)
	e.reconcile(name)
	e.reconcile(name)
	e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
	e.writeState(name)
	providerID := e.fulfillment(name).Status.ProviderID
	if providerID == "" {
		t.Fatal("the applied claim has no provider ID")
	}
	own := test.Node("node-own", providerID, e.clock.Now())
	other := test.Node("node-other", "fake://sim-other", e.clock.Now())
	test.ExpectApplied(t, e.kube, own, other)
	e.reconcile(name)
	e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonJoined)

	if err := e.kube.Delete(e.ctx, e.fulfillment(name)); err != nil {
		t.Fatal(err)
	}
	e.reconcile(name)
	e.expectCondition(name, v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonDestroying)
	test.ExpectExists(t, e.kube, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: own.Name}}) // the machine still runs
	e.reconcile(name)
	test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: own.Name}})
	test.ExpectExists(t, e.kube, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other.Name}})
}
