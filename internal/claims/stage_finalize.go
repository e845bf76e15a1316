package claims

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// finalizeStage destroys the machine of a deleted Fulfillment: it interrupts an apply in
// flight, runs `tofu destroy` until it succeeds, then removes the state, the token and the
// user data, and only then lets the Fulfillment go (and with it, Karpenter's NodeClaim).
type finalizeStage struct{ c *FulfillmentController }

func (d *finalizeStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if s.conds.IsTrue(v1alpha1.ConditionDestroyed) {
		s.removeFinalizer = true
		return reconcile.Result{}, nil
	}
	if s.f.Status.Stages.DestroyStarted == nil {
		now := metav1.NewTime(d.c.clock.Now())
		s.f.Status.Stages.DestroyStarted = &now
	}
	if apply := lastRun(s.f, tfrunner.Apply); apply != nil && apply.Phase == v1alpha1.RunRunning {
		// Cancel returns at once; the runner stops (tofu releases the lock) while the
		// claim is requeued, so no worker waits for it.
		if err := d.c.executor.Cancel(ctx, apply.Name, s.f.Spec.NodeClaimUID); err != nil && !errors.Is(err, tfrunner.ErrRunNotFound) {
			return reconcile.Result{}, fmt.Errorf("interrupting apply %s: %w", apply.Name, err)
		}
		st, err := d.c.executor.Status(ctx, apply.Name, s.f.Spec.NodeClaimUID)
		if err != nil && !errors.Is(err, tfrunner.ErrRunNotFound) {
			return reconcile.Result{}, fmt.Errorf("reading run %s: %w", apply.Name, err)
		}
		if err == nil && !st.Done() {
			s.conds.SetUnknownWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonStoppingApply, "waiting for apply "+apply.Name+" to stop")
			return reconcile.Result{RequeueAfter: pollInterval}, nil
		}
		d.c.finishRun(apply, st)
		if apply.Phase == v1alpha1.RunFailed && !s.conds.IsTrue(v1alpha1.ConditionApplied) {
			// The apply ended while the claim was being deleted: record how.
			s.conds.SetFalse(v1alpha1.ConditionApplied, apply.ErrorClass, apply.Message)
		}
	}
	if lastRun(s.f, tfrunner.Apply) == nil {
		// Nothing was ever applied: no machine and no state can exist.
		return d.destroyed(ctx, s)
	}
	if destroy := lastRun(s.f, tfrunner.Destroy); destroy == nil || destroy.Phase != v1alpha1.RunRunning {
		// An apply that failed before it wrote any state (and holds no lock) left nothing.
		key := statelock.Key(s.f.Spec.StateKey)
		store, err := d.c.stateStore(ctx, s)
		if ce, ok := asConfigError(err); ok {
			return d.blocked(s, ce)
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		exists, err := store.Exists(ctx, key)
		if err != nil {
			return reconcile.Result{}, err
		}
		holder, err := store.LockHolder(ctx, key)
		if err != nil {
			return reconcile.Result{}, err
		}
		if !exists && holder == nil {
			return d.destroyed(ctx, s)
		}
	}
	run := lastRun(s.f, tfrunner.Destroy)
	if run == nil || run.Phase != v1alpha1.RunRunning {
		attempts := runCount(s.f, tfrunner.Destroy)
		if wait := d.c.retryWait(run, attempts); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		return d.start(ctx, s, attempts+1)
	}
	st, err := d.c.executor.Status(ctx, run.Name, s.f.Spec.NodeClaimUID)
	if errors.Is(err, tfrunner.ErrRunNotFound) {
		return d.start(ctx, s, run.Attempt)
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading run %s: %w", run.Name, err)
	}
	run.Log = st.LogPath
	if st.Phase == tfrunner.RunPending || st.Phase == tfrunner.RunRunning {
		return reconcile.Result{RequeueAfter: pollInterval}, nil
	}
	d.c.finishRun(run, st)
	if run.Phase == v1alpha1.RunSucceeded {
		return d.destroyed(ctx, s)
	}
	s.events = append(s.events, runFailedEvent(s.f, run.Name, run.ErrorClass, run.Message))
	wait := d.c.backoff(run.Attempt)
	s.conds.SetFalse(v1alpha1.ConditionDestroyed, run.ErrorClass, fmt.Sprintf("%s (retrying in %s)", run.Message, wait))
	return reconcile.Result{RequeueAfter: wait}, nil
}

func (d *finalizeStage) start(ctx context.Context, s *claimState, attempt int) (reconcile.Result, error) {
	if blocked, err := d.c.acquireLockFor(ctx, s); err != nil || blocked != "" {
		if blocked != "" {
			s.conds.SetUnknownWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonStateLocked, blocked)
		}
		return reconcile.Result{RequeueAfter: lockRecheck}, err
	}
	req, err := d.c.request(ctx, s, tfrunner.Destroy, attempt)
	if ce, ok := asConfigError(err); ok {
		return d.blocked(s, ce)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := d.c.executor.Start(ctx, req); err != nil {
		if errors.Is(err, tfrunner.ErrOtherClaimsRun) && attempt < runCount(s.f, tfrunner.Destroy)+maxNameSkips {
			return d.start(ctx, s, attempt+1) // the name is an earlier claim's (see applyStage.startRun)
		}
		if errors.Is(err, tfrunner.ErrBusy) {
			return reconcile.Result{RequeueAfter: pollInterval}, nil
		}
		return reconcile.Result{}, fmt.Errorf("starting run %s: %w", req.Name, err)
	}
	if last := lastRun(s.f, tfrunner.Destroy); last == nil || last.Attempt != attempt {
		d.c.addRun(s.f, tfrunner.Destroy, attempt)
		log.FromContext(ctx).Info("started tofu destroy", "run", req.Name)
	}
	s.conds.SetUnknownWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonDestroying, "tofu destroy "+req.Name+" is running")
	return reconcile.Result{RequeueAfter: pollInterval}, nil
}

// blocked records that the machine cannot be destroyed until the class's backend Secrets are
// usable again (the class shows the same reason).
func (d *finalizeStage) blocked(s *claimState, ce *ConfigError) (reconcile.Result, error) {
	s.conds.SetFalse(v1alpha1.ConditionDestroyed, ce.Reason, ce.Message)
	return reconcile.Result{RequeueAfter: notReadyRecheck}, nil
}

// destroyed removes what the claim left: its state and lock, token and user data.
func (d *finalizeStage) destroyed(ctx context.Context, s *claimState) (reconcile.Result, error) {
	store, err := d.c.stateStore(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := store.Remove(ctx, statelock.Key(s.f.Spec.StateKey)); err != nil {
		return reconcile.Result{}, err
	}
	if err := d.c.revokeTokens(ctx, s.f.Name); err != nil {
		return reconcile.Result{}, err
	}
	userData := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.c.opts.Namespace, Name: userDataSecretName(s.f)}}
	if err := d.c.kube.Delete(ctx, userData); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("deleting user data: %w", err)
	}
	now := metav1.NewTime(d.c.clock.Now())
	s.f.Status.Stages.Destroyed = &now
	s.conds.SetTrueWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonDestroyed, "machine destroyed and state removed")
	s.events = append(s.events, destroyedEvent(s.f))
	s.removeFinalizer = true
	return reconcile.Result{}, nil
}
