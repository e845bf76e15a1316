// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// maxRuns bounds the run history kept in a Fulfillment's status.
const maxRuns = 10

// Last returns the newest run of an operation.
func Last(f *v1alpha1.Fulfillment, op tfrunner.Operation) *v1alpha1.Run {
	for i := len(f.Status.Runs) - 1; i >= 0; i-- {
		if f.Status.Runs[i].Operation == string(op) {
			return &f.Status.Runs[i]
		}
	}
	return nil
}

// attempts counts the runs of an operation in the claim's history (made: what the bound of
// retries counts) and the highest attempt among them (last: the next run is attempt last+1).
// They differ when attempt numbers skipped names that an earlier claim of the same name left.
func attempts(f *v1alpha1.Fulfillment, op tfrunner.Operation) (made, last int) {
	for _, r := range f.Status.Runs {
		if r.Operation == string(op) {
			made++
			last = max(last, r.Attempt)
		}
	}
	return made, last
}

// maxNameSkips bounds how many run names taken by an earlier claim of the same name are
// skipped.
const maxNameSkips = 20

// Name is the name of a claim's run of op: bounded (tfrunner.RunName): a claim of a long NodePool name gets a run name a
// Job may have.
func Name(f *v1alpha1.Fulfillment, op tfrunner.Operation, attempt int) string {
	return tfrunner.RunName(f.Name, op, attempt)
}

func (r *Runs) addRun(f *v1alpha1.Fulfillment, op tfrunner.Operation, attempt int) *v1alpha1.Run {
	now := metav1.NewTime(r.clock.Now())
	f.Status.Runs = append(f.Status.Runs, v1alpha1.Run{
		Name: Name(f, op, attempt), Operation: string(op), Attempt: attempt,
		Phase: v1alpha1.RunRunning, StartTime: &now,
	})
	if len(f.Status.Runs) > maxRuns {
		f.Status.Runs = f.Status.Runs[len(f.Status.Runs)-maxRuns:]
	}
	f.Status.CurrentRun = f.Status.Runs[len(f.Status.Runs)-1].Name
	return &f.Status.Runs[len(f.Status.Runs)-1]
}

// finishRun records a finished run from the executor's status. Its runner is free: the claim
// that has waited longest for one is woken.
func (r *Runs) finishRun(run *v1alpha1.Run, st executor.RunStatus) {
	r.waiters.wakeNext()
	now := metav1.NewTime(r.clock.Now())
	if st.Result != nil && !st.Result.Finished.IsZero() {
		now = metav1.NewTime(st.Result.Finished)
	}
	run.CompletionTime = &now
	run.Phase, run.Message = v1alpha1.RunSucceeded, ""
	if st.Result == nil || !st.Result.Succeeded {
		run.Phase = v1alpha1.RunFailed
		run.ErrorClass, run.Message = string(tfrunner.Unknown), "run failed without a result"
		if st.Result != nil && st.Result.Error != nil {
			run.ErrorClass, run.Message = string(st.Result.Error.Class), st.Result.Error.Message
			if at := st.Result.Error.RetryAfter; at != nil {
				run.RetryAfter = &metav1.Time{Time: *at}
			}
		}
	}
}

// keepLogTail keeps the end of a failed run's log in its record (Run.LogTail), when the
// executor can read it back: why the run failed outlives its runner. A log that cannot be
// read leaves a note saying so; it does not hold up the claim.
func (r *Runs) keepLogTail(ctx context.Context, c *Claim, run *v1alpha1.Run) {
	tailer, ok := r.executor.(executor.LogTailer)
	if !ok || run.Phase != v1alpha1.RunFailed {
		return
	}
	data, err := tailer.LogTail(ctx, run.Name, c.F.Spec.NodeClaimUID)
	if err != nil {
		log.FromContext(ctx).Info("the log of a failed run cannot be read", "run", run.Name, "error", err.Error())
		run.LogTail = v1alpha1.ShortMessage("(the run's log could not be read: " + err.Error() + ")")
		return
	}
	run.LogTail = tfrunner.Tail(tfrunner.RenderLog(data), tfrunner.MaxLogTail)
}

// maxBackoffFactor bounds the backoff: at most this many times the first wait (5 minutes
// of the default 5 s).
const maxBackoffFactor = 60

// backoff is the wait before attempt n+1 after n failed attempts: RetryBackoff doubled per
// attempt, at most maxBackoffFactor times it.
func (r *Runs) backoff(attempts int) time.Duration {
	factor := int64(1) << min(max(attempts-1, 0), 6) // 64: past the bound, and no overflow
	return r.opts.RetryBackoff * time.Duration(min(factor, maxBackoffFactor))
}

// retryWait is how long to wait before the next attempt, 0 when it may start now: the
// backoff after the failed run, and at least until its RetryAfter (a rate limit's reset).
func (r *Runs) retryWait(run *v1alpha1.Run, attempts int) time.Duration {
	if run == nil || run.Phase != v1alpha1.RunFailed || run.CompletionTime == nil {
		return 0
	}
	until := run.CompletionTime.Add(r.backoff(attempts))
	if run.RetryAfter != nil && run.RetryAfter.After(until) {
		until = run.RetryAfter.Time
	}
	return max(until.Sub(r.clock.Now()), 0)
}
