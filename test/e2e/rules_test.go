// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// TestGenericErrorRuleReplans: a class without a family maps its module's capacity error to
// InsufficientCapacity with an error rule; the sold-out offering is tried once and Karpenter
// re-plans onto another type.
func TestGenericErrorRuleReplans(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	tr := trackFulfillments(t)
	class := nodeClass("e2e-generic",
		nodeType("generic-soldout", "0.01", map[string]string{"apply_error": "capacity"}),
		nodeType("generic-ok", "0.02", nil))
	class.Spec.Family = ""
	class.Spec.ErrorRules = []v1alpha1.ErrorRule{{Code: "resource_unavailable", Class: "InsufficientCapacity"}}
	startScenario(t, ctx, class, nodePool("e2e-generic", "e2e-generic"))
	create(t, ctx, deployment("generic", "e2e-generic", 1, "500m"))
	ok := readyFulfillment(t, ctx, "generic-ok")
	soldOut := tr.byType("generic-soldout")
	if len(soldOut) != 1 {
		t.Fatalf("%d claims tried generic-soldout, want exactly 1 (the rule's capacity error marks the offering unavailable)", len(soldOut))
	}
	eventually(t, ctx, 2*time.Minute, "the sold-out claim to be destroyed", func(ctx context.Context) (bool, error) {
		err := env.kube.Get(ctx, client.ObjectKeyFromObject(soldOut[0]), &v1alpha1.Fulfillment{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	applied := tr.byType("generic-soldout")[0].StatusConditions().Get(v1alpha1.ConditionApplied)
	if applied == nil || !applied.IsFalse() || applied.Reason != "InsufficientCapacity" || !strings.Contains(applied.Message, "resource_unavailable") {
		t.Errorf("the sold-out claim's Applied = %+v, want False/InsufficientCapacity naming resource_unavailable", applied)
	}
	if ok.Spec.NodeClass != class.Name {
		t.Errorf("the pod's node is of class %s", ok.Spec.NodeClass)
	}
	cleanup(t, "generic", "e2e-generic", "e2e-generic")
}
