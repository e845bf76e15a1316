// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
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

// TestStoppedApplyTakesItsNode: a claim deleted while its apply runs never learns its
// machine's provider ID (the apply is stopped before its outputs are read), and Karpenter,
// which finds a claim's Nodes by that ID, cannot delete the Node the machine may have
// registered meanwhile. The destroy removes it by the claim's node name; a Node of that name
// older than the claim, or one a NodeClaim owns, is not the machine's and stays.
func TestStoppedApplyTakesItsNode(t *testing.T) {
	cases := []struct {
		name     string
		node     func(e *env, nodeName string) *corev1.Node
		removed  bool
		ownClaim bool
	}{
		{name: "registered during the apply", removed: true, node: func(e *env, nodeName string) *corev1.Node {
			return test.Node(nodeName, "fake://"+nodeName, e.clock.Now())
		}},
		{name: "older than the claim", node: func(e *env, nodeName string) *corev1.Node {
			return test.Node(nodeName, "fake://elsewhere", e.clock.Now().Add(-time.Hour))
		}},
		{name: "owned by a nodeclaim", ownClaim: true, node: func(e *env, nodeName string) *corev1.Node {
			return test.Node(nodeName, "fake://owned", e.clock.Now())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Hold: true})
			const name = "sim-st0pd"
			e.create(test.NodeClaim(name, "sim", e.clock.Now()))
			e.reconcile(name)
			e.reconcile(name)
			e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, v1alpha1.ReasonApplying)
			e.writeState(name)
			f := e.fulfillment(name)
			node := tc.node(e, f.Spec.NodeName)
			test.ExpectApplied(t, e.kube, node)
			if tc.ownClaim {
				owner := test.NodeClaim("sim-own3r", "sim", e.clock.Now(), func(c *karpv1.NodeClaim) { c.Status.ProviderID = node.Spec.ProviderID })
				test.ExpectApplied(t, e.kube, owner)
			}

			if err := e.kube.Delete(e.ctx, f); err != nil {
				t.Fatal(err)
			}
			for range 5 {
				if err := e.kube.Get(e.ctx, client.ObjectKeyFromObject(f), f); apierrors.IsNotFound(err) {
					break
				}
				if f.Status.ProviderID != "" {
					t.Fatalf("the stopped apply recorded provider ID %q", f.Status.ProviderID)
				}
				e.reconcile(name)
			}
			test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}})
			if tc.removed {
				test.ExpectNotFound(t, e.kube, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}})
			} else {
				test.ExpectExists(t, e.kube, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}})
			}
		})
	}
}
