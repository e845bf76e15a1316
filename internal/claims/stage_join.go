// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// nodeProviderIDField is the Node index Karpenter's operator registers.
const nodeProviderIDField = "spec.providerID"

// joinStage waits for the Node with the claim's provider ID, revokes the bootstrap token as
// soon as it is there, and gives up after the node type's join timeout (decideWaiting); while
// it waits, the family's observation of the machine (machineStage) says why.
type joinStage struct{ c *FulfillmentController }

func (j *joinStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	joined := s.conds.Get(v1alpha1.ConditionJoined)
	if !s.conds.IsTrue(v1alpha1.ConditionApplied) || s.conds.IsTrue(v1alpha1.ConditionJoined) || (joined != nil && joined.IsFalse()) {
		return reconcile.Result{}, nil
	}
	nodes := &corev1.NodeList{}
	if err := j.c.kube.List(ctx, nodes, client.MatchingFields{nodeProviderIDField: s.f.Status.ProviderID}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodes by provider id: %w", err)
	}
	if len(nodes.Items) > 0 {
		node := &nodes.Items[0]
		if err := j.c.revokeTokens(ctx, s.f.Name); err != nil {
			return reconcile.Result{}, err
		}
		s.f.Status.NodeName = node.Name
		registered := node.CreationTimestamp
		s.f.Status.Stages.Registered = &registered
		s.conds.SetTrueWithReason(v1alpha1.ConditionJoined, v1alpha1.ReasonJoined, "node "+node.Name+" registered")
		s.events = append(s.events, joinedEvent(s.f, node.Name))
		return reconcile.Result{}, nil
	}
	timeout := v1alpha1.DefaultJoinTimeout
	if s.nt != nil {
		timeout = s.nt.JoinTimeoutOrDefault()
	}
	waited := j.c.clock.Since(s.f.Status.Stages.Applied.Time)
	d := decideWaiting(s.observed, s.f.Status.ProviderID, waited, timeout)
	if d.Fail {
		s.conds.SetFalse(v1alpha1.ConditionJoined, d.Reason, d.Message)
		s.events = append(s.events, joinFailedEvent(s.f, d.Reason, d.Message))
		if d.MarkUnavailable {
			j.c.unavailable.MarkUnavailable(s.f.Spec.NodeType, s.f.Spec.Zone, s.f.Spec.CapacityType)
		}
		s.replaceClaim = true
		return reconcile.Result{}, nil
	}
	s.conds.SetUnknownWithReason(v1alpha1.ConditionJoined, d.Reason, d.Message)
	return reconcile.Result{RequeueAfter: min(5*time.Second, timeout-waited)}, nil
}

// revokeTokens deletes the claim's bootstrap token Secrets: once the node registered, nobody
// may join with them again.
func (c *FulfillmentController) revokeTokens(ctx context.Context, claim string) error {
	err := c.kube.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace("kube-system"),
		client.MatchingLabels{LabelNodeClaim: claim, bootstrap.LabelManagedBy: bootstrap.ManagedBy}, client.MatchingFields{"type": "bootstrap.kubernetes.io/token"})
	if err != nil {
		return fmt.Errorf("revoking bootstrap tokens: %w", err)
	}
	return nil
}
