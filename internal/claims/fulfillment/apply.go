// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/message"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// applyStage runs `tofu apply` until it succeeds once (the run driver starts, watches,
// restarts and retries the runs), then records the machine it made.
type applyStage struct {
	runs  *run.Driver
	clock clock.Clock
}

// applyRuns is the run driver of the apply: Applied is its condition, failures are decided by
// run.DecideApplyFailure and retried at most maxAttempts times.
func applyRuns(runs *run.Runs, clk clock.Clock, maxAttempts int) *run.Driver {
	return &run.Driver{
		Runs: runs, Op: tfrunner.Apply,
		Condition: v1alpha1.ConditionApplied, Running: v1alpha1.ReasonApplying,
		MaxAttempts: maxAttempts,
		Decide:      run.DecideApplyFailure,
		Started: func(c *run.Claim, r *v1alpha1.Run) {
			c.Events = append(c.Events, applyStartedEvent(c.F, r.Name))
			if c.F.Status.Stages.ApplyStarted == nil {
				now := metav1.NewTime(clk.Now())
				c.F.Status.Stages.ApplyStarted = &now
			}
		},
		Watch: func(c *run.Claim, r *v1alpha1.Run) {
			reportOverdue(c, r, runs.Settings(c).ApplyDeadlineOrDefault(), clk)
		},
	}
}

func (a *applyStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	applied := s.Conds.Get(v1alpha1.ConditionApplied)
	if s.F.Status.UserDataSecret == "" || s.Conds.IsTrue(v1alpha1.ConditionApplied) || (applied != nil && applied.IsFalse()) {
		return reconcile.Result{}, nil
	}
	result, res, err := a.runs.Drive(ctx, &s.Claim)
	if err != nil || res == nil {
		return result, err
	}
	return a.succeeded(s, res)
}

func (a *applyStage) succeeded(s *claimState, res *tfrunner.Result) (reconcile.Result, error) {
	providerID := res.ProviderID
	if s.F.Spec.ProviderID != "" && providerID != s.F.Spec.ProviderID {
		s.Conds.SetFalse(v1alpha1.ConditionApplied, v1alpha1.ReasonProviderIDMismatch,
			fmt.Sprintf("module reported provider_id %q, the node type's template gives %q", providerID, s.F.Spec.ProviderID))
		return reconcile.Result{}, nil
	}
	s.F.Status.ProviderID, s.F.Status.Addresses = providerID, res.Addresses
	now := metav1.NewTime(a.clock.Now())
	s.F.Status.Stages.Applied = &now
	s.Conds.SetTrueWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonApplied, "machine "+providerID+" created")
	s.Events = append(s.Events, appliedEvent(s.F, providerID))
	return reconcile.Result{}, nil
}

// reportOverdue says so on the Applied condition, with one event, once an apply runs past its
// node type's deadline (its runner is interrupting it: the request carries the deadline).
func reportOverdue(c *run.Claim, r *v1alpha1.Run, deadline time.Duration, clk clock.Clock) {
	if c.F.Status.Stages.ApplyStarted == nil {
		return
	}
	running := clk.Since(c.F.Status.Stages.ApplyStarted.Time)
	if running < deadline {
		return
	}
	msg := fmt.Sprintf("%s: still running after the node type's apply deadline of %s", r.Name, message.Duration(deadline))
	if cond := c.Conds.Get(v1alpha1.ConditionApplied); cond == nil || cond.Reason != v1alpha1.ReasonApplyOverdue {
		c.Events = append(c.Events, applyOverdueEvent(c.F, msg))
	}
	c.Conds.SetUnknownWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonApplyOverdue, msg)
}
