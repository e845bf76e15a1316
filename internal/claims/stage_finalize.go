// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	if s.f.Status.Stages.DestroyStarted == nil && awaitsKarpenter(s) {
		// Deleted by someone other than Karpenter while its claim is launched: Karpenter
		// drains the node once its NodeClaim is deleted, then calls Delete.
		if err := d.c.deleteClaim(ctx, s); err != nil {
			return reconcile.Result{}, err
		}
		s.conds.SetUnknownWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonAwaitingNodeClaimDeletion,
			"waiting for Karpenter to drain the node of nodeclaim "+s.claim.Name+" and delete it")
		return reconcile.Result{RequeueAfter: notReadyRecheck}, nil
	}
	if s.f.Status.Stages.DestroyStarted == nil {
		// An apply started just before the deletion may be missing from the status (the
		// write that recorded it conflicted): find it by name before trusting the record.
		if _, err := d.c.applyRuns().findUnrecorded(ctx, s); err != nil {
			return reconcile.Result{}, err
		}
		now := metav1.NewTime(d.c.clock.Now())
		s.f.Status.Stages.DestroyStarted = &now
	}
	if apply, ended, err := d.c.applyRuns().stop(ctx, s); err != nil || !ended {
		if err == nil {
			s.conds.SetUnknownWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonStoppingApply, "waiting for apply "+apply.Name+" to stop")
		}
		return reconcile.Result{RequeueAfter: pollInterval}, err
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
			return d.c.destroyRuns().waitForClass(s, ce), nil
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
	result, res, err := d.c.destroyRuns().drive(ctx, s)
	if err != nil || res == nil {
		return result, err
	}
	return d.destroyed(ctx, s)
}

// awaitsKarpenter: the Fulfillment was not deleted through CloudProvider.Delete, and its
// NodeClaim (this claim, not a later one of the same name) is launched, so Karpenter will
// drain its node and call Delete once the NodeClaim is deleted. A claim that never launched
// (no provider ID) or whose NodeClaim is gone is destroyed at once: Karpenter calls Delete
// only for a claim with a provider ID.
func awaitsKarpenter(s *claimState) bool {
	if _, called := s.f.Annotations[v1alpha1.AnnotationDeleteCalled]; called {
		return false
	}
	return s.claim != nil && string(s.claim.UID) == s.f.Spec.NodeClaimUID && s.claim.Status.ProviderID != ""
}

// destroyRuns is the run driver of the destroy: Destroyed is its condition, and a failed
// destroy is retried with backoff until the machine is gone.
func (c *FulfillmentController) destroyRuns() *runDriver {
	return &runDriver{
		c: c, op: tfrunner.Destroy,
		condition: v1alpha1.ConditionDestroyed, running: v1alpha1.ReasonDestroying,
		maxAttempts: func() int { return 0 },
		decide:      decideDestroyFailure,
	}
}

// destroyed removes what the claim left: its state and lock, its pool lease, token and user
// data.
func (d *finalizeStage) destroyed(ctx context.Context, s *claimState) (reconcile.Result, error) {
	store, err := d.c.stateStore(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := store.Remove(ctx, statelock.Key(s.f.Spec.StateKey)); err != nil {
		return reconcile.Result{}, err
	}
	if err := d.c.releasePool(ctx, s); err != nil {
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
