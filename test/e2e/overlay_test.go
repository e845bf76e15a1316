// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpv1alpha1 "sigs.k8s.io/karpenter/pkg/apis/v1alpha1"
)

// TestNodeOverlayPrice: a NodePool allows two types, the class prices ov-cheap below
// ov-dear, and a NodeOverlay of the pool lowers ov-dear's price below ov-cheap's. Once
// Karpenter's NodeOverlay controller says the overlay is Ready, a pod that fits both gets a
// node of ov-dear (the local environment turns the NodeOverlay gate on), recorded at the
// class's price; no claim of ov-cheap is made.
func TestNodeOverlayPrice(t *testing.T) {
	ctx := ctxFor(t, 6*time.Minute)
	tr := trackFulfillments(t)
	class := nodeClass("e2e-overlay", nodeType("ov-cheap", "0.01", nil), nodeType("ov-dear", "0.05", nil))
	price := "0.001"
	overlay := &karpv1alpha1.NodeOverlay{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-overlay-dear"},
		Spec: karpv1alpha1.NodeOverlaySpec{
			Requirements: []karpv1alpha1.NodeSelectorRequirement{
				{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"e2e-overlay"}},
				{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"ov-dear"}},
			},
			Price: &price,
		},
	}
	t.Cleanup(func() { _ = env.kube.Delete(context.Background(), overlay) })
	startScenario(t, ctx, class, nodePool("e2e-overlay", "e2e-overlay"))
	create(t, ctx, overlay)
	eventually(t, ctx, time.Minute, "nodeoverlay "+overlay.Name+" to be Ready", func(ctx context.Context) (bool, error) {
		got := &karpv1alpha1.NodeOverlay{}
		if err := env.kube.Get(ctx, client.ObjectKeyFromObject(overlay), got); err != nil {
			return false, err
		}
		return got.StatusConditions().Root().IsTrue(), nil
	})
	create(t, ctx, deployment("overlay", "e2e-overlay", 1, "500m"))
	dear := readyFulfillment(t, ctx, "ov-dear")
	if dear.Spec.NodePool != "e2e-overlay" || dear.Spec.Price != "0.05" {
		t.Errorf("the ov-dear claim is of pool %s at %s, want e2e-overlay at the class's 0.05", dear.Spec.NodePool, dear.Spec.Price)
	}
	if cheap := tr.byType("ov-cheap"); len(cheap) != 0 {
		t.Errorf("%d claims of ov-cheap, want none: the overlay made ov-dear the cheaper", len(cheap))
	}
	cleanup(t, "overlay", "e2e-overlay", "e2e-overlay")
}
