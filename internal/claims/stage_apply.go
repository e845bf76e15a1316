package claims

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// pollInterval is how often a claim with a run in progress is looked at.
const pollInterval = 2 * time.Second

// lockRecheck is how often a run waiting for its state lock looks again.
const lockRecheck = 10 * time.Second

// applyStage runs `tofu apply` until it succeeds once. A run is started under a name derived
// from the claim and the attempt, and executors start a name only once, so neither a
// restarted controller nor a lost status write starts a second apply.
type applyStage struct{ c *FulfillmentController }

func (a *applyStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	applied := s.conds.Get(v1alpha1.ConditionApplied)
	if s.f.Status.UserDataSecret == "" || s.conds.IsTrue(v1alpha1.ConditionApplied) || (applied != nil && applied.IsFalse()) {
		return reconcile.Result{}, nil
	}
	run := lastRun(s.f, tfrunner.Apply)
	if run == nil || run.Phase != v1alpha1.RunRunning {
		return a.start(ctx, s, run)
	}
	st, err := a.c.executor.Status(ctx, run.Name, s.f.Spec.NodeClaimUID)
	if errors.Is(err, tfrunner.ErrRunNotFound) {
		// Recorded but never started (the executor lost it before it began): start it now.
		return a.startRun(ctx, s, run.Attempt, false)
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading run %s: %w", run.Name, err)
	}
	run.Log = st.LogPath
	if st.Phase == tfrunner.RunPending || st.Phase == tfrunner.RunRunning {
		if st.Progress != "" && st.Progress != run.Message {
			run.Message = st.Progress
			s.conds.SetUnknownWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonApplying, run.Name+": "+st.Progress)
		}
		a.reportOverdue(s, run)
		return reconcile.Result{RequeueAfter: pollInterval}, nil
	}
	a.c.finishRun(run, st)
	if run.Phase == v1alpha1.RunSucceeded {
		return a.succeeded(s, st.Result)
	}
	return a.failed(ctx, s, run)
}

func (a *applyStage) start(ctx context.Context, s *claimState, last *v1alpha1.Run) (reconcile.Result, error) {
	attempts := runCount(s.f, tfrunner.Apply)
	if wait := a.c.retryWait(last, attempts); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	return a.startRun(ctx, s, attempts+1, true)
}

func (a *applyStage) startRun(ctx context.Context, s *claimState, attempt int, record bool) (reconcile.Result, error) {
	if blocked, err := a.c.acquireLockFor(ctx, s); err != nil || blocked != "" {
		if blocked != "" {
			s.conds.SetUnknownWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonStateLocked, blocked)
		}
		return reconcile.Result{RequeueAfter: lockRecheck}, err
	}
	req, err := a.c.request(ctx, s, tfrunner.Apply, attempt)
	if ce, ok := asConfigError(err); ok {
		// The class shows the same reason (BackendReady); no run starts until it is fixed.
		s.conds.SetUnknownWithReason(v1alpha1.ConditionApplied, ce.Reason, ce.Message)
		return reconcile.Result{RequeueAfter: notReadyRecheck}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := a.c.executor.Start(ctx, req); err != nil {
		if errors.Is(err, tfrunner.ErrOtherClaimsRun) && attempt < runCount(s.f, tfrunner.Apply)+maxNameSkips {
			// An earlier claim of this name left a run of this name (kept for its log): this
			// claim's run takes the next attempt's name.
			log.FromContext(ctx).Info("run name taken by an earlier claim of the same name", "run", req.Name)
			return a.startRun(ctx, s, attempt+1, true)
		}
		if errors.Is(err, tfrunner.ErrBusy) {
			s.conds.SetUnknownWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonWaitingForRunner, "as many tofu runs as allowed are in progress")
			return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
		}
		return reconcile.Result{}, fmt.Errorf("starting run %s: %w", req.Name, err)
	}
	if record {
		run := a.c.addRun(s.f, tfrunner.Apply, attempt)
		s.events = append(s.events, applyStartedEvent(s.f, run.Name))
		log.FromContext(ctx).Info("started tofu apply", "run", run.Name)
	}
	if s.f.Status.Stages.ApplyStarted == nil {
		now := metav1.NewTime(a.c.clock.Now())
		s.f.Status.Stages.ApplyStarted = &now
	}
	s.conds.SetUnknownWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonApplying, "tofu apply "+req.Name+" is running")
	return reconcile.Result{RequeueAfter: pollInterval}, nil
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

// failed records a failed apply as decideApplyFailure says: the offering marked unavailable
// and the claim replaced, another attempt after a backoff, or the claim replaced; the class
// stays on the Fulfillment as the Applied condition's reason.
func (a *applyStage) failed(ctx context.Context, s *claimState, run *v1alpha1.Run) (reconcile.Result, error) {
	class := tfrunner.ErrorClass(run.ErrorClass)
	s.events = append(s.events, runFailedEvent(s.f, run.Name, run.ErrorClass, run.Message))
	log.FromContext(ctx).Info("tofu apply failed", "run", run.Name, "class", class, "message", run.Message)
	decision := decideApplyFailure(class)
	switch {
	case decision.MarkUnavailable:
		a.c.unavailable.MarkUnavailable(s.f.Spec.NodeType, s.f.Spec.Zone, s.f.Spec.CapacityType)
		s.conds.SetFalse(v1alpha1.ConditionApplied, decision.Reason, run.Message)
		s.replaceClaim = true
		return reconcile.Result{}, nil
	case decision.Retry && runsMade(s.f, tfrunner.Apply) < a.c.opts.MaxApplyAttempts:
		wait := a.c.backoff(run.Attempt)
		s.conds.SetUnknownWithReason(v1alpha1.ConditionApplied, decision.Reason, fmt.Sprintf("%s (retrying in %s)", run.Message, wait))
		return reconcile.Result{RequeueAfter: wait}, nil
	default:
		s.conds.SetFalse(v1alpha1.ConditionApplied, decision.Reason, run.Message)
		s.replaceClaim = true
		return reconcile.Result{}, nil
	}
}

// reportOverdue says so on the Applied condition, with one event, once an apply runs past its
// node type's deadline.
func (a *applyStage) reportOverdue(s *claimState, run *v1alpha1.Run) {
	if s.nt == nil || s.f.Status.Stages.ApplyStarted == nil {
		return
	}
	deadline := s.nt.ApplyDeadline()
	running := a.c.clock.Since(s.f.Status.Stages.ApplyStarted.Time)
	if running < deadline {
		return
	}
	msg := fmt.Sprintf("%s: still running after the node type's apply deadline of %s", run.Name, shortDuration(deadline))
	if c := s.conds.Get(v1alpha1.ConditionApplied); c == nil || c.Reason != v1alpha1.ReasonApplyOverdue {
		s.events = append(s.events, applyOverdueEvent(s.f, msg))
	}
	s.conds.SetUnknownWithReason(v1alpha1.ConditionApplied, v1alpha1.ReasonApplyOverdue, msg)
}
