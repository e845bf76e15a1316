// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
)

// joinStage waits for the Node with the claim's provider ID, revokes the bootstrap token as
// soon as it is there, and gives up after the node type's join timeout, or at once when the
// machine reports a failed step (decideWaiting); while it waits, the machine's BootReport and
// the family's observation of the machine (machineStage) say why.
type joinStage struct {
	kube        client.Client
	clock       clock.Clock
	unavailable run.Unavailable
	// namespace holds the claims' BootReports.
	namespace string
}

func (j *joinStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	joined := s.Conds.Get(v1alpha1.ConditionJoined)
	if !s.Conds.IsTrue(v1alpha1.ConditionApplied) || s.Conds.IsTrue(v1alpha1.ConditionJoined) || (joined != nil && joined.IsFalse()) {
		return reconcile.Result{}, nil
	}
	nodes := &corev1.NodeList{}
	if err := j.kube.List(ctx, nodes, client.MatchingFields{classconfig.NodeProviderIDField: s.F.Status.ProviderID}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodes by provider id: %w", err)
	}
	if len(nodes.Items) > 0 {
		node := &nodes.Items[0]
		if err := revokeTokens(ctx, j.kube, s.F.Name); err != nil {
			return reconcile.Result{}, err
		}
		s.F.Status.NodeName = node.Name
		registered := node.CreationTimestamp
		s.F.Status.Stages.Registered = &registered
		s.Conds.SetTrueWithReason(v1alpha1.ConditionJoined, v1alpha1.ReasonJoined, "node "+node.Name+" registered")
		s.Events = append(s.Events, joinedEvent(s.F, node.Name))
		return reconcile.Result{}, nil
	}
	timeout := v1alpha1.DefaultJoinTimeout
	if s.NodeType != nil {
		timeout = s.NodeType.JoinTimeoutOrDefault()
	}
	report := &v1alpha1.BootReport{}
	err := j.kube.Get(ctx, client.ObjectKey{Namespace: j.namespace, Name: s.F.Name}, report)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("reading the boot report: %w", err)
	}
	waited := j.clock.Since(s.F.Status.Stages.Applied.Time)
	d := decideWaiting(s.observed, &report.Status, s.F.Status.ProviderID, waited, timeout)
	if d.Fail {
		s.Conds.SetFalse(v1alpha1.ConditionJoined, d.Reason, d.Message)
		s.Events = append(s.Events, joinFailedEvent(s.F, d.Reason, d.Message))
		if d.MarkUnavailable {
			j.unavailable.MarkUnavailable(s.F.Spec.NodeType, s.F.Spec.Zone, s.F.Spec.CapacityType)
		}
		s.Replace = true
		return reconcile.Result{}, nil
	}
	s.Conds.SetUnknownWithReason(v1alpha1.ConditionJoined, d.Reason, d.Message)
	return reconcile.Result{RequeueAfter: min(5*time.Second, timeout-waited)}, nil
}
