// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// initializationStage mirrors Karpenter's Initialized condition of the claim: the node is
// Ready, its startup and readiness taints are gone and requested resources are advertised.
type initializationStage struct{}

func (i *initializationStage) reconcile(_ context.Context, s *claimState) (reconcile.Result, error) {
	if !s.Conds.IsTrue(v1alpha1.ConditionJoined) || s.Conds.IsTrue(v1alpha1.ConditionInitialized) || s.claim == nil {
		return reconcile.Result{}, nil
	}
	cond := s.claim.StatusConditions().Get(karpv1.ConditionTypeInitialized)
	if cond == nil || !cond.IsTrue() {
		reason, msg := v1alpha1.ReasonAwaitingInitialization, "waiting for Karpenter to initialize the node"
		if cond != nil && cond.Reason != "" {
			reason, msg = cond.Reason, cond.Message
		}
		s.Conds.SetUnknownWithReason(v1alpha1.ConditionInitialized, reason, msg)
		return reconcile.Result{}, nil
	}
	t := metav1.NewTime(cond.LastTransitionTime.Time)
	s.F.Status.Stages.Initialized = &t
	s.Conds.SetTrueWithReason(v1alpha1.ConditionInitialized, v1alpha1.ReasonInitialized, "node "+s.F.Status.NodeName+" is ready for pods")
	return reconcile.Result{}, nil
}
