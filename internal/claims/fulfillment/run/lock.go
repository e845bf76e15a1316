// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// lockVerdict is what a run about to start does about its claim's state lock.
type lockVerdict int

const (
	lockFree    lockVerdict = iota // no lock: start
	lockStale                      // held by a run of this claim that is gone: release, then start
	lockRunning                    // held by a run of this claim that still runs: wait
	lockForeign                    // held by someone the executor cannot attribute: never break it
)

// judgeLock decides from the lock's holder and the executor's attribution.
func judgeLock(holder *statelock.Holder, a executor.Attribution) lockVerdict {
	switch {
	case holder == nil:
		return lockFree
	case a.Run == "":
		return lockForeign
	case a.Gone:
		return lockStale
	default:
		return lockRunning
	}
}

// lockBlocked explains, for the condition of the waiting stage, who holds the lock since when.
func lockBlocked(holder *statelock.Holder, a executor.Attribution, v lockVerdict) string {
	since := holder.Created.UTC().Format(time.RFC3339)
	if v == lockRunning {
		return fmt.Sprintf("state lock held by run %s (%s) since %s: %s", a.Run, holder.Who, since, a.Detail)
	}
	return fmt.Sprintf("state lock held by %s (lock %s, %s) since %s, which is not a run of this claim; "+
		"once it is gone, release it with `tofu force-unlock %s`", holder.Who, holder.ID, holder.Operation, since, holder.ID)
}

// acquireLockFor makes sure the claim's state lock is free before one of its runs starts. A
// lock left by a run of this claim whose runner provably no longer exists (its pod or
// process is gone) is released, with an event and a metric. A lock held by a live run, or
// by anyone the executor cannot attribute, is left alone: it returns a message saying who
// holds it since when, and the run waits. Only the kubernetes backend's locks outlive their
// holder; other backends' are released when the session that took them ends.
func (r *Runs) acquireLockFor(ctx context.Context, c *Claim) (string, error) {
	if r.Settings(c).Backend.TypeOrDefault() != v1alpha1.BackendKubernetes {
		return "", nil
	}
	ns, key := r.stateNamespace(c), statelock.Key(c.F.Spec.StateKey)
	holder, err := statelock.LockHolder(ctx, r.apiReader, ns, key)
	if err != nil || holder == nil {
		c.F.Status.LockHolder = nil
		return "", err
	}
	var a executor.Attribution
	if attributor, ok := r.executor.(executor.LockAttributor); ok {
		runs := make([]string, 0, len(c.F.Status.Runs))
		for _, run := range c.F.Status.Runs {
			runs = append(runs, run.Name)
		}
		if a, err = attributor.AttributeLock(ctx, executor.LockOwner{Who: holder.Who, Created: holder.Created}, runs); err != nil {
			return "", fmt.Errorf("attributing the state lock: %w", err)
		}
	}
	v := judgeLock(holder, a)
	if v == lockStale {
		switch err := statelock.ReleaseStale(ctx, r.apiReader, r.kube, ns, key, holder); {
		case errors.Is(err, statelock.ErrLockChanged):
			return "state lock changed hands while being recovered", nil
		case err != nil:
			return "", err
		}
		statelock.StaleLockRecoveries.WithLabelValues(c.F.Spec.NodeClass).Inc()
		c.Done = append(c.Done, staleLockRecoveredEvent(c.F, holder.ID, a.Detail))
		log.FromContext(ctx).Info("released a stale state lock", "lock", holder.ID, "who", holder.Who, "detail", a.Detail)
		c.F.Status.LockHolder = nil
		return "", nil
	}
	since := metav1.NewTime(holder.Created)
	c.F.Status.LockHolder = &v1alpha1.LockHolder{Who: holder.Who, ID: holder.ID, Operation: holder.Operation, Since: &since, Run: a.Run}
	return lockBlocked(holder, a, v), nil
}
