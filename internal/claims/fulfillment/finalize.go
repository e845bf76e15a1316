// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// finalizeStage destroys the machine of a deleted Fulfillment: it interrupts an apply in
// flight, runs `tofu destroy` until it succeeds, then removes the state, the token and the
// user data, and only then lets the Fulfillment go (and with it, Karpenter's NodeClaim).
type finalizeStage struct {
	kube           client.Client
	clock          clock.Clock
	runs           *run.Runs
	apply, destroy *run.Driver
	pools          *classconfig.Pools
	// namespace holds the claims' user data.
	namespace string
}

// awaitingKarpenterRecheck: a Fulfillment deleted by someone else waits for Karpenter to
// delete its claim and looks again.
const awaitingKarpenterRecheck = 20 * time.Second

func (d *finalizeStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if s.Conds.IsTrue(v1alpha1.ConditionDestroyed) {
		s.removeFinalizer = true
		return reconcile.Result{}, nil
	}
	if s.F.Status.Stages.DestroyStarted == nil && awaitsKarpenter(s) {
		// Deleted by someone other than Karpenter while its claim is launched: Karpenter
		// drains the node once its NodeClaim is deleted, then calls Delete.
		if err := deleteClaim(ctx, d.kube, s); err != nil {
			return reconcile.Result{}, err
		}
		s.Conds.SetUnknownWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonAwaitingNodeClaimDeletion,
			"waiting for Karpenter to drain the node of nodeclaim "+s.claim.Name+" and delete it")
		return reconcile.Result{RequeueAfter: awaitingKarpenterRecheck}, nil
	}
	if s.F.Status.Stages.DestroyStarted == nil {
		// An apply started just before the deletion may be missing from the status (the
		// write that recorded it conflicted): find it by name before trusting the record.
		if _, err := d.apply.FindUnrecorded(ctx, &s.Claim); err != nil {
			return reconcile.Result{}, err
		}
		now := metav1.NewTime(d.clock.Now())
		s.F.Status.Stages.DestroyStarted = &now
	}
	if apply, ended, err := d.apply.Stop(ctx, &s.Claim); err != nil || !ended {
		if err == nil {
			s.Conds.SetUnknownWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonStoppingApply, "waiting for apply "+apply.Name+" to stop")
		}
		return reconcile.Result{RequeueAfter: run.PollInterval}, err
	}
	destroy := run.Last(s.F, tfrunner.Destroy)
	destroying := destroy != nil && destroy.Phase == v1alpha1.RunRunning
	if !destroying && !everApplied(s.F) {
		// Nothing was ever applied: no machine and no state can exist.
		return d.destroyed(ctx, s)
	}
	if !destroying {
		// An apply that failed before it wrote any state (and holds no lock) left nothing.
		key := statelock.Key(s.F.Spec.StateKey)
		store, err := d.runs.StateStore(ctx, &s.Claim)
		if ce, ok := classconfig.AsConfigError(err); ok {
			return d.destroy.WaitForClass(&s.Claim, ce), nil
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
	result, res, err := d.destroy.Drive(ctx, &s.Claim)
	if err != nil || res == nil {
		return result, err
	}
	return d.destroyed(ctx, s)
}

// everApplied reports whether an apply of the claim ever started. The run history keeps the
// last runs only (a destroy that keeps failing pushes the apply out of it), so the record is
// Stages.ApplyStarted, which is never trimmed, set with the first apply's run (also one the
// status missed and found again); an apply in the history counts too.
func everApplied(f *v1alpha1.Fulfillment) bool {
	return f.Status.Stages.ApplyStarted != nil || run.Last(f, tfrunner.Apply) != nil
}

// awaitsKarpenter: the Fulfillment was not deleted through CloudProvider.Delete, and its
// NodeClaim (this claim, not a later one of the same name) is launched, so Karpenter will
// drain its node and call Delete once the NodeClaim is deleted. A claim that never launched
// (no provider ID) or whose NodeClaim is gone is destroyed at once: Karpenter calls Delete
// only for a claim with a provider ID.
func awaitsKarpenter(s *claimState) bool {
	if _, called := s.F.Annotations[v1alpha1.AnnotationDeleteCalled]; called {
		return false
	}
	return s.claim != nil && string(s.claim.UID) == s.F.Spec.NodeClaimUID && s.claim.Status.ProviderID != ""
}

// destroyRuns is the run driver of the destroy: Destroyed is its condition, and a failed
// destroy is retried with backoff until the machine is gone.
func destroyRuns(runs *run.Runs) *run.Driver {
	return &run.Driver{
		Runs: runs, Op: tfrunner.Destroy,
		Condition: v1alpha1.ConditionDestroyed, Running: v1alpha1.ReasonDestroying,
		Decide: run.DecideDestroyFailure,
	}
}

// destroyed removes what the claim left: its state and lock, its pool lease, token and user
// data.
func (d *finalizeStage) destroyed(ctx context.Context, s *claimState) (reconcile.Result, error) {
	store, err := d.runs.StateStore(ctx, &s.Claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := store.Remove(ctx, statelock.Key(s.F.Spec.StateKey)); err != nil {
		return reconcile.Result{}, err
	}
	if err := d.releasePool(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if err := d.removeNodes(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if err := revokeTokens(ctx, d.kube, s.F.Name); err != nil {
		return reconcile.Result{}, err
	}
	userData := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.namespace, Name: classconfig.UserDataSecretName(s.F)}}
	if err := d.kube.Delete(ctx, userData); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("deleting user data: %w", err)
	}
	now := metav1.NewTime(d.clock.Now())
	s.F.Status.Stages.Destroyed = &now
	s.Conds.SetTrueWithReason(v1alpha1.ConditionDestroyed, v1alpha1.ReasonDestroyed, "machine destroyed and state removed")
	s.Events = append(s.Events, destroyedEvent(s.F))
	s.removeFinalizer = true
	return reconcile.Result{}, nil
}

// releasePool gives the claim's machine back to its class's pool once its destroy
// succeeded. With the class gone, the pool keeper of no class can see the lease; it stays
// until the class is back.
func (d *finalizeStage) releasePool(ctx context.Context, s *claimState) error {
	pool, scope, ok := d.pools.Of(s.Class)
	if !ok {
		return nil
	}
	if err := pool.Release(ctx, scope, family.PoolClaim{Name: s.F.Name, UID: s.F.Spec.NodeClaimUID, NodeType: s.F.Spec.NodeType}); err != nil {
		return fmt.Errorf("releasing the claim's machine to the pool: %w", err)
	}
	return nil
}

// removeNodes deletes the Nodes of the destroyed machine, as a cloud controller manager's
// node lifecycle controller deletes the Node of an instance that is gone (no such controller
// runs for these families). Karpenter usually deleted the Node already, before it called
// Delete; a claim Karpenter no longer maps to its machine (its garbage collection, a
// Fulfillment deleted by hand, a NodeClaim deleted mid-apply) would otherwise leave a NotReady
// Node behind. Karpenter's finalizer on the Node still lets its termination controller
// finish: it asks Get, which now answers that the machine is gone.
func (d *finalizeStage) removeNodes(ctx context.Context, s *claimState) error {
	nodes, err := d.machineNodes(ctx, s)
	if err != nil {
		return err
	}
	for _, node := range nodes {
		if node.DeletionTimestamp != nil {
			continue
		}
		if err := d.kube.Delete(ctx, node, client.Preconditions{UID: &node.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting node %s of the destroyed machine: %w", node.Name, err)
		}
	}
	return nil
}

// machineNodes finds the Nodes the destroyed machine registered: by its provider ID once an
// apply's outputs recorded it or a pool leased the machine. Without one (an apply stopped or failed after it powered the
// machine on, before its outputs were read: its NodeClaim was deleted mid-apply), the machine
// may still have joined under the claim's node name; that Node is the machine's when it
// registered after the claim was made and no NodeClaim carries its provider ID, so that
// Karpenter, which finds a claim's Nodes by the provider ID in its status, never will.
func (d *finalizeStage) machineNodes(ctx context.Context, s *claimState) ([]*corev1.Node, error) {
	providerID := s.F.Status.ProviderID
	if providerID == "" {
		providerID = s.F.Spec.ProviderID
	}
	if providerID != "" {
		list := &corev1.NodeList{}
		if err := d.kube.List(ctx, list, client.MatchingFields{classconfig.NodeProviderIDField: providerID}); err != nil {
			return nil, fmt.Errorf("listing the nodes of the destroyed machine: %w", err)
		}
		nodes := make([]*corev1.Node, 0, len(list.Items))
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
		return nodes, nil
	}
	if s.F.Spec.NodeName == "" {
		return nil, nil
	}
	node := &corev1.Node{}
	if err := d.kube.Get(ctx, client.ObjectKey{Name: s.F.Spec.NodeName}, node); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if node.CreationTimestamp.Before(&s.F.CreationTimestamp) {
		return nil, nil
	}
	if node.Spec.ProviderID != "" {
		claims := &karpv1.NodeClaimList{}
		if err := d.kube.List(ctx, claims, client.MatchingFields{classconfig.NodeClaimProviderIDField: node.Spec.ProviderID}); err != nil {
			return nil, fmt.Errorf("listing the nodeclaims of node %s: %w", node.Name, err)
		}
		if len(claims.Items) > 0 {
			return nil, nil
		}
	}
	return []*corev1.Node{node}, nil
}
