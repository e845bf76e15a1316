// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// recordGrace is how long a launched claim may be without its Fulfillment before
// RecordRecovery writes it: the write after Create's answer takes a moment, the cache
// another.
const recordGrace = 30 * time.Second

// RecordRecovery writes the Fulfillment of a claim that Karpenter launched but whose record
// was lost: the process ended between Create's answer and the write
// (WithRecordsAfterAnswer). The claim holds the decision, as Karpenter stored Create's answer
// on it: node type, zone and capacity type labels, and the provider ID. Until its machine
// registers nothing else would ever make one for it: Karpenter does not call Create again
// for a launched claim.
type RecordRecovery struct {
	provider *CloudProvider
	clock    clock.Clock
}

func NewRecordRecovery(provider *CloudProvider, clk clock.Clock) *RecordRecovery {
	return &RecordRecovery{provider: provider, clock: clk}
}

func (r *RecordRecovery) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("fulfillment.recovery").
		For(&karpv1.NodeClaim{}).
		Complete(reconcile.AsReconciler(m.GetClient(), r))
}

func (r *RecordRecovery) Reconcile(ctx context.Context, claim *karpv1.NodeClaim) (reconcile.Result, error) {
	launched := claim.StatusConditions().Get(karpv1.ConditionTypeLaunched)
	if claim.Spec.NodeClassRef == nil || claim.Spec.NodeClassRef.Group != v1alpha1.Group || !claim.DeletionTimestamp.IsZero() ||
		launched == nil || !launched.IsTrue() || claim.StatusConditions().IsTrue(karpv1.ConditionTypeRegistered) {
		return reconcile.Result{}, nil
	}
	if wait := recordGrace - r.clock.Since(launched.LastTransitionTime.Time); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	return reconcile.Result{}, r.provider.recoverRecord(ctx, claim)
}

// recoverRecord writes the record of a launched claim that has none, from the claim.
func (c *CloudProvider) recoverRecord(ctx context.Context, claim *karpv1.NodeClaim) error {
	if _, err := c.recorded(ctx, claim); !apierrors.IsNotFound(err) {
		return err // recorded (or pending), or unknown
	}
	if c.records != nil && c.records.has(claim.Name) {
		return nil // being written or deleted
	}
	nc, err := c.nodeClass(ctx, claim.Spec.NodeClassRef.Name)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if _, _, pooled := c.pools.Of(nc); pooled {
		return nil // recorded before the answer, with the lease
	}
	logger := log.FromContext(ctx).WithValues("nodeclaim", claim.Name)
	nt, ok := nc.NodeType(claim.Labels[corev1.LabelInstanceTypeStable])
	if !ok {
		logger.Info("a launched claim has no record, and its node type is gone from the nodeclass; it is replaced at its registration timeout",
			"nodeType", claim.Labels[corev1.LabelInstanceTypeStable])
		return nil
	}
	zone, capType := claim.Labels[corev1.LabelTopologyZone], claim.Labels[karpv1.CapacityTypeLabelKey]
	f, err := c.fulfillmentFor(nc, claim, nt, zone, capType, c.offeringPrice(nc, nt.Name, zone, capType))
	if err != nil {
		return err
	}
	if f.Spec.ProviderID == "" || f.Spec.ProviderID != claim.Status.ProviderID {
		// Create answers a provider ID it does not predict only once the apply reported it,
		// which the record was written for: this claim's record did not get lost after the
		// answer.
		logger.Info("a launched claim has no record, and its provider ID is not the one its node type predicts; it is replaced at its registration timeout",
			"providerID", claim.Status.ProviderID, "predicted", f.Spec.ProviderID)
		return nil
	}
	if err := c.kube.Create(ctx, f); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("recording the decision of launched claim %s: %w", claim.Name, err)
	}
	logger.Info("recorded the decision of a launched claim whose record was lost", "nodeType", nt.Name, "zone", zone, "capacityType", capType)
	return nil
}

// offeringPrice is the price of the class's offering, 0 when it is not offered now.
func (c *CloudProvider) offeringPrice(nc *v1alpha1.TofuNodeClass, nodeType, zone, capType string) float64 {
	its, err := c.instanceTypes(nc)
	if err != nil {
		return 0
	}
	for _, it := range its {
		if it.Name != nodeType {
			continue
		}
		for _, o := range it.Offerings {
			if o.Requirements.Get(corev1.LabelTopologyZone).Any() == zone && o.Requirements.Get(karpv1.CapacityTypeLabelKey).Any() == capType {
				return o.Price
			}
		}
	}
	return 0
}
