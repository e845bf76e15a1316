// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// Requeue intervals of a claim with a run.
const (
	// PollInterval: a run in progress is looked at again.
	PollInterval = 2 * time.Second
	// ReportedPollInterval: a run whose end the executor reports (RunStatus.EndReported;
	// RunEnded wakes its claim) is looked at again for its progress and deadline only.
	ReportedPollInterval = 10 * time.Second
	// LockRecheck: a run waiting for its state lock looks again.
	LockRecheck = 10 * time.Second
	// AdmissionRecheck: a run the executor did not admit (no free runner) asks again, or
	// when the budget it waits for says, if later; one waiting for a runner is woken sooner
	// when a run ends (Waiters).
	AdmissionRecheck = 5 * time.Second
	// classRecheck: a run that waits for its class's configuration to be usable looks again.
	classRecheck = 20 * time.Second
)

// Driver drives the runs of one operation of a claim, the same way for apply and destroy:
// after a failed run's backoff, once the claim's state lock is free, it builds the request
// and starts the run, waits while the executor admits none, restarts a run the executor lost,
// reports the run's progress on its condition, records how it ended, and retries a failed
// one with backoff while the operation's failure decision allows. A run's name comes from the
// claim and the attempt, and executors start a name only once, so neither a restarted
// controller nor a lost status write starts a run twice.
type Driver struct {
	Runs *Runs
	Op   tfrunner.Operation
	// Condition shows where the operation is (Applied, Destroyed); Running is its reason
	// while a run goes on (Applying, Destroying).
	Condition, Running string
	// MaxAttempts bounds the runs made for failures that are retried (0: no bound).
	MaxAttempts int
	// Decide says what a failed run of the operation means.
	Decide func(tfrunner.ErrorClass) FailureDecision
	// Started, when set, records a new run (stage times, events).
	Started func(c *Claim, run *v1alpha1.Run)
	// Watch, when set, looks at a run that goes on (the apply's deadline).
	Watch func(c *Claim, run *v1alpha1.Run)
}

// Drive moves the operation's runs on by one step. It returns the result of a run that has
// just succeeded (the stage records what it made); nil otherwise.
func (d *Driver) Drive(ctx context.Context, c *Claim) (reconcile.Result, *tfrunner.Result, error) {
	run := Last(c.F, d.Op)
	if run == nil || run.Phase != v1alpha1.RunRunning {
		made, last := attempts(c.F, d.Op)
		if wait := d.Runs.retryWait(run, made); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil, nil
		}
		res, err := d.start(ctx, c, last+1, true)
		return res, nil, err
	}
	st, err := d.Runs.executor.Status(ctx, run.Name, c.F.Spec.NodeClaimUID)
	if errors.Is(err, executor.ErrRunNotFound) {
		// Recorded but lost by the executor (it never began, or its record is gone): start it
		// again under the same name.
		log.FromContext(ctx).Info("run not found, starting it again", "run", run.Name)
		res, err := d.start(ctx, c, run.Attempt, false)
		return res, nil, err
	}
	if err != nil {
		return reconcile.Result{}, nil, fmt.Errorf("reading run %s: %w", run.Name, err)
	}
	run.Log = st.LogPath
	if !st.Done() {
		if st.Progress != "" && st.Progress != run.Message {
			run.Message = st.Progress
			c.Conds.SetUnknownWithReason(d.Condition, d.Running, run.Name+": "+st.Progress)
		}
		if d.Watch != nil {
			d.Watch(c, run)
		}
		if st.EndReported {
			return reconcile.Result{RequeueAfter: ReportedPollInterval}, nil, nil
		}
		return reconcile.Result{RequeueAfter: PollInterval}, nil, nil
	}
	d.Runs.finishRun(run, st)
	if run.Phase == v1alpha1.RunSucceeded {
		return reconcile.Result{}, st.Result, nil
	}
	d.Runs.keepLogTail(ctx, c, run)
	res, err := d.failed(ctx, c, run)
	return res, nil, err
}

// Stop stops the operation's run in flight, if there is one: it cancels it (Cancel returns at
// once; the runner stops, and tofu releases its lock, while the claim is requeued) and reports
// whether it has ended. An ended run is recorded, and a failed one's class goes on the
// condition unless it is True.
func (d *Driver) Stop(ctx context.Context, c *Claim) (*v1alpha1.Run, bool, error) {
	run := Last(c.F, d.Op)
	if run == nil || run.Phase != v1alpha1.RunRunning {
		return run, true, nil
	}
	if err := d.Runs.executor.Cancel(ctx, run.Name, c.F.Spec.NodeClaimUID); err != nil && !errors.Is(err, executor.ErrRunNotFound) {
		return run, false, fmt.Errorf("interrupting %s %s: %w", d.Op, run.Name, err)
	}
	st, err := d.Runs.executor.Status(ctx, run.Name, c.F.Spec.NodeClaimUID)
	if err != nil && !errors.Is(err, executor.ErrRunNotFound) {
		return run, false, fmt.Errorf("reading run %s: %w", run.Name, err)
	}
	if err == nil && !st.Done() {
		return run, false, nil
	}
	d.Runs.finishRun(run, st)
	if err == nil {
		d.Runs.keepLogTail(ctx, c, run)
	}
	if run.Phase == v1alpha1.RunFailed && !c.Conds.IsTrue(d.Condition) {
		c.Conds.SetFalse(d.Condition, run.ErrorClass, run.Message)
	}
	return run, true, nil
}

// start starts the run of the given attempt; record adds it to the claim's runs (a lost run
// being started again is recorded already).
func (d *Driver) start(ctx context.Context, c *Claim, attempt int, record bool) (reconcile.Result, error) {
	if blocked, err := d.Runs.acquireLockFor(ctx, c); err != nil || blocked != "" {
		if blocked != "" {
			c.Conds.SetUnknownWithReason(d.Condition, v1alpha1.ReasonStateLocked, blocked)
		}
		return reconcile.Result{RequeueAfter: LockRecheck}, err
	}
	req, err := d.Runs.request(ctx, c, d.Op, attempt)
	if ce, ok := classconfig.AsConfigError(err); ok {
		return d.WaitForClass(c, ce), nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	err = d.Runs.executor.Start(ctx, req)
	_, last := attempts(c.F, d.Op)
	var refused *executor.AdmissionError
	switch {
	case errors.Is(err, executor.ErrOtherClaimsRun) && attempt < last+maxNameSkips:
		// An earlier claim of this name left a run of this name (kept for its log): this
		// claim's run takes the next attempt's name.
		log.FromContext(ctx).Info("run name taken by an earlier claim of the same name", "run", req.Name)
		return d.start(ctx, c, attempt+1, true)
	case errors.As(err, &refused):
		c.Conds.SetUnknownWithReason(d.Condition, refused.Reason, refused.Message)
		if refused.Reason == v1alpha1.ReasonWaitingForRunner {
			d.Runs.waiters.add(c.F.Name)
		}
		return reconcile.Result{RequeueAfter: max(AdmissionRecheck, refused.RetryAfter)}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("starting run %s: %w", req.Name, err)
	}
	d.Runs.waiters.remove(c.F.Name)
	if record {
		run := d.Runs.addRun(c.F, d.Op, attempt)
		log.FromContext(ctx).Info("started tofu "+string(d.Op), "run", run.Name)
		if d.Started != nil {
			d.Started(c, run)
		}
	}
	c.Conds.SetUnknownWithReason(d.Condition, d.Running, fmt.Sprintf("tofu %s %s is running", d.Op, req.Name))
	return reconcile.Result{RequeueAfter: PollInterval}, nil
}

// WaitForClass records that no run can start until the class's configuration is usable again
// (the class shows the same reason).
func (d *Driver) WaitForClass(c *Claim, ce *classconfig.ConfigError) reconcile.Result {
	c.Conds.SetUnknownWithReason(d.Condition, ce.Reason, ce.Message)
	return reconcile.Result{RequeueAfter: classRecheck}
}

// failed records a failed run as the operation's decision says: another run after a backoff,
// or the condition False and the claim replaced, the offering marked unavailable where the
// same inputs would fail again. The class stays on the condition as its reason.
func (d *Driver) failed(ctx context.Context, c *Claim, run *v1alpha1.Run) (reconcile.Result, error) {
	class := tfrunner.ErrorClass(run.ErrorClass)
	c.Events = append(c.Events, runFailedEvent(c.F, run.Name, run.ErrorClass, run.Message))
	log.FromContext(ctx).Info("tofu "+string(d.Op)+" failed", "run", run.Name, "class", class, "message", run.Message)
	decision := d.Decide(class)
	if decision.MarkUnavailable {
		d.Runs.unavailable.MarkUnavailable(c.F.Spec.NodeType, c.F.Spec.Zone, c.F.Spec.CapacityType)
	}
	made, _ := attempts(c.F, d.Op)
	if limit := d.MaxAttempts; decision.Retry && (limit == 0 || made < limit) {
		wait := d.Runs.backoff(made)
		if run.RetryAfter != nil {
			// Not before the cloud API's rate limit resets.
			wait = max(wait, run.RetryAfter.Sub(d.Runs.clock.Now()).Round(time.Second))
		}
		c.Conds.SetUnknownWithReason(d.Condition, decision.Reason, fmt.Sprintf("%s (retrying in %s)", run.Message, wait))
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	c.Conds.SetFalse(d.Condition, decision.Reason, run.Message)
	c.Replace = true
	return reconcile.Result{}, nil
}

// FindUnrecorded finds and records a run of the operation that the executor started for this
// claim but the status does not have, because the write that recorded it failed: it is the
// next attempt's run (or one after it, when an earlier claim of the same name took that
// name). Executors know a run by its name and its claim's UID. Nil when there is none.
func (d *Driver) FindUnrecorded(ctx context.Context, c *Claim) (*v1alpha1.Run, error) {
	if last := Last(c.F, d.Op); last != nil && last.Phase == v1alpha1.RunRunning {
		return nil, nil
	}
	_, last := attempts(c.F, d.Op)
	next := last + 1
	for attempt := next; attempt < next+maxNameSkips; attempt++ {
		name := Name(c.F, d.Op, attempt)
		_, err := d.Runs.executor.Status(ctx, name, c.F.Spec.NodeClaimUID)
		switch {
		case errors.Is(err, executor.ErrOtherClaimsRun):
			continue
		case errors.Is(err, executor.ErrRunNotFound):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("reading run %s: %w", name, err)
		}
		log.FromContext(ctx).Info("found a run the status did not record", "run", name)
		run := d.Runs.addRun(c.F, d.Op, attempt)
		if d.Started != nil {
			d.Started(c, run) // what the lost write would have recorded
		}
		return run, nil
	}
	return nil, nil
}
