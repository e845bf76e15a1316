// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// applyStage runs `tofu apply` until it succeeds once (the run driver starts, watches,
// restarts and retries the runs), then records the machine it made.
type applyStage struct{ c *FulfillmentController }

// applyRuns is the run driver of the apply: Applied is its condition, failures are decided by
// decideApplyFailure and retried at most MaxApplyAttempts times.
func (c *FulfillmentController) applyRuns() *runDriver {
	return &runDriver{
		c: c, op: tfrunner.Apply,
		condition: v1alpha1.ConditionApplied, running: v1alpha1.ReasonApplying,
		maxAttempts: func() int { return c.opts.MaxApplyAttempts },
		decide:      decideApplyFailure,
		started: func(s *claimState, run *v1alpha1.Run) {
			s.events = append(s.events, applyStartedEvent(s.f, run.Name))
			if s.f.Status.Stages.ApplyStarted == nil {
				now := metav1.NewTime(c.clock.Now())
				s.f.Status.Stages.ApplyStarted = &now
			}
		},
		watch: c.reportOverdue,
	}
}

func (a *applyStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	applied := s.conds.Get(v1alpha1.ConditionApplied)
	if s.f.Status.UserDataSecret == "" || s.conds.IsTrue(v1alpha1.ConditionApplied) || (applied != nil && applied.IsFalse()) {
		return reconcile.Result{}, nil
	}
	result, res, err := a.c.applyRuns().drive(ctx, s)
	if err != nil || res == nil {
		return result, err
	}
	return a.succeeded(s, res)
}

func (a *applyStage) succeeded(s *claimState, res *tfrunner.Result) (reconcile.Result, error) {
	providerID := res.ProviderID
	if s.f.Spec.ProviderID != "" && providerID != s.f.Spec.ProviderID {
		s.conds.SetFalse(v1alpha1.ConditionApplied, v1alpha1.ReasonProviderIDMismatch,
			fmt.Sprintf("module reported provider_id %q, the node type's template gives %q", providerID, s.f.Spec.ProviderID))
		return reconcile.Result{}, nil
	}
	s.f.Status.ProviderID, s.f.Status.Addresses = providerID, res.Addresses
	now := metav1.NewTime(a.c.clock.Now())
	s.f.Status.Stages.Applied = &now
	s.conds.SetTrueWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonApplied, "machine "+providerID+" created")
	s.events = append(s.events, appliedEvent(s.f, providerID))
	return reconcile.Result{Requeue: true}, nil
}

// reportOverdue says so on the Applied condition, with one event, once an apply runs past its
// node type's deadline (its runner is interrupting it: the request carries the deadline).
func (c *FulfillmentController) reportOverdue(s *claimState, run *v1alpha1.Run) {
	if s.f.Status.Stages.ApplyStarted == nil {
		return
	}
	deadline := c.runSettings(s).ApplyDeadlineOrDefault()
	running := c.clock.Since(s.f.Status.Stages.ApplyStarted.Time)
	if running < deadline {
		return
	}
	msg := fmt.Sprintf("%s: still running after the node type's apply deadline of %s", run.Name, shortDuration(deadline))
	if cond := s.conds.Get(v1alpha1.ConditionApplied); cond == nil || cond.Reason != v1alpha1.ReasonApplyOverdue {
		s.events = append(s.events, applyOverdueEvent(s.f, msg))
	}
	s.conds.SetUnknownWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonApplyOverdue, msg)
}
