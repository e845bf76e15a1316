// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// Requeue intervals of a claim with a run.
const (
	// pollInterval: a run in progress is looked at again.
	pollInterval = 2 * time.Second
	// reportedPollInterval: a run whose end the executor reports (RunStatus.EndReported;
	// RunEnded wakes its claim) is looked at again for its progress and deadline only.
	reportedPollInterval = 10 * time.Second
	// lockRecheck: a run waiting for its state lock looks again.
	lockRecheck = 10 * time.Second
	// admissionRecheck: a run the executor did not admit (no free runner) asks again, or
	// when the budget it waits for says, if later; one waiting for a runner is woken sooner
	// when a run ends (runWaiters).
	admissionRecheck = 5 * time.Second
)

// runDriver drives the runs of one operation of a claim, the same way for apply and destroy:
// after a failed run's backoff, once the claim's state lock is free, it builds the request
// and starts the run, waits while the executor admits none, restarts a run the executor lost,
// reports the run's progress on its condition, records how it ended, and retries a failed
// one with backoff while the operation's failure decision allows. A run's name comes from the
// claim and the attempt, and executors start a name only once, so neither a restarted
// controller nor a lost status write starts a run twice.
type runDriver struct {
	c  *FulfillmentController
	op tfrunner.Operation
	// condition shows where the operation is (Applied, Destroyed); running is its reason
	// while a run goes on (Applying, Destroying).
	condition, running string
	// maxAttempts bounds the runs made for failures that are retried (0: no bound).
	maxAttempts func() int
	// decide says what a failed run of the operation means.
	decide func(tfrunner.ErrorClass) failureDecision
	// started, when set, records a new run (stage times, events).
	started func(s *claimState, run *v1alpha1.Run)
	// watch, when set, looks at a run that goes on (the apply's deadline).
	watch func(s *claimState, run *v1alpha1.Run)
}

// drive moves the operation's runs on by one step. It returns the result of a run that has
// just succeeded (the stage records what it made); nil otherwise.
func (d *runDriver) drive(ctx context.Context, s *claimState) (reconcile.Result, *tfrunner.Result, error) {
	run := lastRun(s.f, d.op)
	if run == nil || run.Phase != v1alpha1.RunRunning {
		if wait := d.c.retryWait(run, runsMade(s.f, d.op)); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil, nil
		}
		res, err := d.start(ctx, s, runCount(s.f, d.op)+1, true)
		return res, nil, err
	}
	st, err := d.c.executor.Status(ctx, run.Name, s.f.Spec.NodeClaimUID)
	if errors.Is(err, executor.ErrRunNotFound) {
		// Recorded but lost by the executor (it never began, or its record is gone): start it
		// again under the same name.
		log.FromContext(ctx).Info("run not found, starting it again", "run", run.Name)
		res, err := d.start(ctx, s, run.Attempt, false)
		return res, nil, err
	}
	if err != nil {
		return reconcile.Result{}, nil, fmt.Errorf("reading run %s: %w", run.Name, err)
	}
	run.Log = st.LogPath
	if !st.Done() {
		if st.Progress != "" && st.Progress != run.Message {
			run.Message = st.Progress
			s.conds.SetUnknownWithReason(d.condition, d.running, run.Name+": "+st.Progress)
		}
		if d.watch != nil {
			d.watch(s, run)
		}
		if st.EndReported {
			return reconcile.Result{RequeueAfter: reportedPollInterval}, nil, nil
		}
		return reconcile.Result{RequeueAfter: pollInterval}, nil, nil
	}
	d.c.finishRun(run, st)
	if run.Phase == v1alpha1.RunSucceeded {
		return reconcile.Result{}, st.Result, nil
	}
	res, err := d.failed(ctx, s, run)
	return res, nil, err
}

// stop stops the operation's run in flight, if there is one: it cancels it (Cancel returns at
// once; the runner stops, and tofu releases its lock, while the claim is requeued) and reports
// whether it has ended. An ended run is recorded, and a failed one's class goes on the
// condition unless it is True.
func (d *runDriver) stop(ctx context.Context, s *claimState) (*v1alpha1.Run, bool, error) {
	run := lastRun(s.f, d.op)
	if run == nil || run.Phase != v1alpha1.RunRunning {
		return run, true, nil
	}
	if err := d.c.executor.Cancel(ctx, run.Name, s.f.Spec.NodeClaimUID); err != nil && !errors.Is(err, executor.ErrRunNotFound) {
		return run, false, fmt.Errorf("interrupting %s %s: %w", d.op, run.Name, err)
	}
	st, err := d.c.executor.Status(ctx, run.Name, s.f.Spec.NodeClaimUID)
	if err != nil && !errors.Is(err, executor.ErrRunNotFound) {
		return run, false, fmt.Errorf("reading run %s: %w", run.Name, err)
	}
	if err == nil && !st.Done() {
		return run, false, nil
	}
	d.c.finishRun(run, st)
	if run.Phase == v1alpha1.RunFailed && !s.conds.IsTrue(d.condition) {
		s.conds.SetFalse(d.condition, run.ErrorClass, run.Message)
	}
	return run, true, nil
}

// start starts the run of the given attempt; record adds it to the claim's runs (a lost run
// being started again is recorded already).
func (d *runDriver) start(ctx context.Context, s *claimState, attempt int, record bool) (reconcile.Result, error) {
	if blocked, err := d.c.acquireLockFor(ctx, s); err != nil || blocked != "" {
		if blocked != "" {
			s.conds.SetUnknownWithReason(d.condition, v1alpha1.ReasonStateLocked, blocked)
		}
		return reconcile.Result{RequeueAfter: lockRecheck}, err
	}
	req, err := d.c.request(ctx, s, d.op, attempt)
	if ce, ok := asConfigError(err); ok {
		return d.waitForClass(s, ce), nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	err = d.c.executor.Start(ctx, req)
	var refused *executor.AdmissionError
	switch {
	case errors.Is(err, executor.ErrOtherClaimsRun) && attempt < runCount(s.f, d.op)+maxNameSkips:
		// An earlier claim of this name left a run of this name (kept for its log): this
		// claim's run takes the next attempt's name.
		log.FromContext(ctx).Info("run name taken by an earlier claim of the same name", "run", req.Name)
		return d.start(ctx, s, attempt+1, true)
	case errors.As(err, &refused):
		s.conds.SetUnknownWithReason(d.condition, refused.Reason, refused.Message)
		if refused.Reason == v1alpha1.ReasonWaitingForRunner {
			d.c.waiters.add(s.f.Name)
		}
		return reconcile.Result{RequeueAfter: max(admissionRecheck, refused.RetryAfter)}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("starting run %s: %w", req.Name, err)
	}
	d.c.waiters.remove(s.f.Name)
	if record {
		run := d.c.addRun(s.f, d.op, attempt)
		log.FromContext(ctx).Info("started tofu "+string(d.op), "run", run.Name)
		if d.started != nil {
			d.started(s, run)
		}
	}
	s.conds.SetUnknownWithReason(d.condition, d.running, fmt.Sprintf("tofu %s %s is running", d.op, req.Name))
	return reconcile.Result{RequeueAfter: pollInterval}, nil
}

// waitForClass records that no run can start until the class's configuration is usable again
// (the class shows the same reason).
func (d *runDriver) waitForClass(s *claimState, ce *ConfigError) reconcile.Result {
	s.conds.SetUnknownWithReason(d.condition, ce.Reason, ce.Message)
	return reconcile.Result{RequeueAfter: notReadyRecheck}
}

// failed records a failed run as the operation's decision says: another run after a backoff,
// or the condition False and the claim replaced, the offering marked unavailable where the
// same inputs would fail again. The class stays on the condition as its reason.
func (d *runDriver) failed(ctx context.Context, s *claimState, run *v1alpha1.Run) (reconcile.Result, error) {
	class := tfrunner.ErrorClass(run.ErrorClass)
	s.events = append(s.events, runFailedEvent(s.f, run.Name, run.ErrorClass, run.Message))
	log.FromContext(ctx).Info("tofu "+string(d.op)+" failed", "run", run.Name, "class", class, "message", run.Message)
	decision := d.decide(class)
	if decision.MarkUnavailable {
		d.c.unavailable.MarkUnavailable(s.f.Spec.NodeType, s.f.Spec.Zone, s.f.Spec.CapacityType)
	}
	made := runsMade(s.f, d.op)
	if limit := d.maxAttempts(); decision.Retry && (limit == 0 || made < limit) {
		wait := d.c.backoff(made)
		if run.RetryAfter != nil {
			// Not before the cloud API's rate limit resets.
			wait = max(wait, run.RetryAfter.Sub(d.c.clock.Now()).Round(time.Second))
		}
		s.conds.SetUnknownWithReason(d.condition, decision.Reason, fmt.Sprintf("%s (retrying in %s)", run.Message, wait))
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	s.conds.SetFalse(d.condition, decision.Reason, run.Message)
	s.replaceClaim = true
	return reconcile.Result{}, nil
}

// findUnrecorded finds and records a run of the operation that the executor started for this
// claim but the status does not have, because the write that recorded it failed: it is the
// next attempt's run (or one after it, when an earlier claim of the same name took that
// name). Executors know a run by its name and its claim's UID. Nil when there is none.
func (d *runDriver) findUnrecorded(ctx context.Context, s *claimState) (*v1alpha1.Run, error) {
	if last := lastRun(s.f, d.op); last != nil && last.Phase == v1alpha1.RunRunning {
		return nil, nil
	}
	next := runCount(s.f, d.op) + 1
	for attempt := next; attempt < next+maxNameSkips; attempt++ {
		name := runName(s.f, d.op, attempt)
		_, err := d.c.executor.Status(ctx, name, s.f.Spec.NodeClaimUID)
		switch {
		case errors.Is(err, executor.ErrOtherClaimsRun):
			continue
		case errors.Is(err, executor.ErrRunNotFound):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("reading run %s: %w", name, err)
		}
		log.FromContext(ctx).Info("found a run the status did not record", "run", name)
		return d.c.addRun(s.f, d.op, attempt), nil
	}
	return nil, nil
}
