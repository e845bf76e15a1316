// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// nodeLabelPolicy refuses, at creation, a Node of pool e2e-refused, and a Node of pool
// e2e-labels without its NodePool template's team label. Both labels are the NodeClaim's, not
// the node type's: a kubelet that registered with the type's labels only would pass the first
// rule and fail the second.
func nodeLabelPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	deny := admissionregistrationv1.Deny
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-labels"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression: "!has(object.metadata.labels) || object.metadata.labels[?'karpenter.sh/nodepool'].orValue('') != 'e2e-refused'",
					Message:    "nodes of pool e2e-refused are refused",
				},
				{
					Expression: "!has(object.metadata.labels) || object.metadata.labels[?'karpenter.sh/nodepool'].orValue('') != 'e2e-labels' || object.metadata.labels[?'e2e.fulfiller.sh/team'].orValue('') == 'payments'",
					Message:    "nodes of pool e2e-labels must be born with their team label",
				},
			},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-labels"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.ValidationAction(deny)},
		},
	}
	return policy, binding
}

// TestNodeBornWithClaimLabels: a ValidatingAdmissionPolicy on Node creation sees the
// NodeClaim's labels (the pool's, the NodePool template's). A pool whose Nodes the policy
// requires to carry the template's label gets nodes; a pool whose label it refuses gets a
// claim that never registers, and is replaced and destroyed. Karpenter's own removal of a
// claim that never registers comes 15 minutes after its creation (a constant in core); the
// test relies instead on the node type's join timeout, which reaps the same claim through the
// same Delete path in seconds.
func TestNodeBornWithClaimLabels(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	policy, binding := nodeLabelPolicy()
	create(t, ctx, policy, binding)
	t.Cleanup(func() {
		_ = env.kube.Delete(context.Background(), binding)
		_ = env.kube.Delete(context.Background(), policy)
	})
	tr := trackFulfillments(t)
	plain := nodeType("labelled", "0.01", nil)
	plain.JoinTimeout = &metav1.Duration{Duration: 20 * time.Second}
	labelled := nodePool("e2e-labels", "e2e-labels")
	labelled.Spec.Template.Labels = map[string]string{"e2e.fulfiller.sh/team": "payments"}
	refused := nodePool("e2e-refused", "e2e-labels")
	refused.Spec.Template.Labels = map[string]string{"e2e.fulfiller.sh/team": "payments"}
	startScenario(t, ctx, nodeClass("e2e-labels", plain), labelled)
	create(t, ctx, refused)
	// The binding takes effect once the API server's policy informer has it; a policy that is
	// not yet in force would let the refused pool's Node in and fail the test, not pass it.
	create(t, ctx, deployment("labelled", "e2e-labels", 1, "500m"), deployment("refused", "e2e-refused", 1, "500m"))
	start := time.Now()

	eventually(t, ctx, 3*time.Minute, "the pod of pool e2e-labels to be bound to a node", func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := env.kube.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "labelled"}); err != nil {
			return false, err
		}
		return len(pods.Items) == 1 && pods.Items[0].Spec.NodeName != "", nil
	})
	t.Logf("pool e2e-labels: node registered through the policy, pod bound after %s", time.Since(start).Round(time.Second))

	var refusedClaim *v1alpha1.Fulfillment
	eventually(t, ctx, 3*time.Minute, "a claim of pool e2e-refused to fail joining and be destroyed", func(ctx context.Context) (bool, error) {
		for _, f := range tr.byType("labelled") {
			joined := f.StatusConditions().Get(v1alpha1.ConditionJoined)
			if f.Spec.NodePool == "e2e-refused" && joined != nil && joined.IsFalse() &&
				f.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed) {
				refusedClaim = f
				return true, nil
			}
		}
		return false, nil
	})
	joined := refusedClaim.StatusConditions().Get(v1alpha1.ConditionJoined)
	t.Logf("pool e2e-refused: claim %s Joined=False %s (%q), destroyed after %s", refusedClaim.Name, joined.Reason, joined.Message, time.Since(start).Round(time.Second))
	nodes := &corev1.NodeList{}
	if err := env.kube.List(ctx, nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: "e2e-refused"}); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 0 {
		t.Errorf("%d Nodes of pool e2e-refused exist; the policy should have refused them at creation", len(nodes.Items))
	}
	eventually(t, ctx, time.Minute, "nodeclaim "+refusedClaim.Name+" to be gone", func(ctx context.Context) (bool, error) {
		err := env.kube.Get(ctx, client.ObjectKey{Name: refusedClaim.Name}, &karpv1.NodeClaim{})
		return err != nil, client.IgnoreNotFound(err)
	})

	_ = env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "refused"}})
	_ = env.kube.Delete(ctx, refused)
	cleanup(t, "labelled", "e2e-labels", "e2e-labels")
}
