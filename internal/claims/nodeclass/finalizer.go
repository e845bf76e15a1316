// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/awslabs/operatorpkg/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
)

// FinalizerClaims keeps a TofuNodeClass while Fulfillments reference it: their machines are
// destroyed with the settings they recorded, and the class goes last.
const FinalizerClaims = v1alpha1.Group + "/claims"

// terminatingRecheck: a terminating class counts its claims again (a Fulfillment's deletion
// also wakes it).
const terminatingRecheck = 30 * time.Second

// ensureFinalizer adds the class's finalizer, and returns the class as it is then.
func (c *Controller) ensureFinalizer(ctx context.Context, nc *v1alpha1.TofuNodeClass) (*v1alpha1.TofuNodeClass, error) {
	if controllerutil.ContainsFinalizer(nc, FinalizerClaims) {
		return nc, nil
	}
	patched := nc.DeepCopy()
	controllerutil.AddFinalizer(patched, FinalizerClaims)
	if err := c.kube.Patch(ctx, patched, client.MergeFromWithOptions(nc, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, fmt.Errorf("adding finalizer: %w", err)
	}
	return patched, nil
}

// terminate lets a deleted class go once no Fulfillment references it; until then its
// Terminating condition says how many claims remain.
func (c *Controller) terminate(ctx context.Context, nc *v1alpha1.TofuNodeClass) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(nc, FinalizerClaims) {
		return reconcile.Result{}, nil
	}
	claims, err := classClaims(ctx, c.kube, nc.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(claims) == 0 {
		patched := nc.DeepCopy()
		controllerutil.RemoveFinalizer(patched, FinalizerClaims)
		if err := c.kube.Patch(ctx, patched, client.MergeFrom(nc)); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("removing finalizer: %w", err)
		}
		return reconcile.Result{}, nil
	}
	updated := nc.DeepCopy()
	conds := updated.StatusConditions(status.WithClock(c.clock))
	msg := remainingMessage(claims)
	before := conds.Get(v1alpha1.ConditionTerminating)
	conds.SetTrueWithReason(v1alpha1.ConditionTerminating, v1alpha1.ReasonClaimsRemaining, msg)
	classconfig.ShortenConditions(updated.Status.Conditions)
	if err := c.kube.Status().Patch(ctx, updated, client.MergeFromWithOptions(nc, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return reconcile.Result{}, fmt.Errorf("writing nodeclass status: %w", err)
	}
	if before == nil {
		c.recorder.Publish(classconfig.ShortenEvents([]events.Event{nodeClassTerminatingEvent(updated, msg)})...)
	}
	return reconcile.Result{RequeueAfter: terminatingRecheck}, nil
}

// remainingMessage says how many claims a terminating class waits for, and names a few.
func remainingMessage(claims []string) string {
	noun := "claims"
	if len(claims) == 1 {
		noun = "claim"
	}
	names := claims[:min(len(claims), 3)]
	more := ""
	if len(claims) > len(names) {
		more = ", ..."
	}
	return fmt.Sprintf("waiting for %d %s to be destroyed (%s%s); delete the NodePools that use the class, or their NodeClaims",
		len(claims), noun, strings.Join(names, ", "), more)
}

// classClaims names the Fulfillments that reference a class, sorted.
func classClaims(ctx context.Context, reader client.Reader, class string) ([]string, error) {
	list := &v1alpha1.FulfillmentList{}
	if err := reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing fulfillments: %w", err)
	}
	var names []string
	for i := range list.Items {
		if list.Items[i].Spec.NodeClass == class {
			names = append(names, list.Items[i].Name)
		}
	}
	slices.Sort(names)
	return names, nil
}
