// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"context"
	"errors"
	"fmt"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// A class whose family is a finite pool (classconfig.Pools) offers only the node types its
// pool has a machine for now, and Create leases the claim one.

// withPoolOffers makes a pool class's offerings unavailable for the node types its pool has
// no machine for now. The instance types are copied: the cached ones stay as they are.
// It also names the types whose pool is exhausted.
func (c *CloudProvider) withPoolOffers(ctx context.Context, nc *v1alpha1.TofuNodeClass, its []*cloudprovider.InstanceType) ([]*cloudprovider.InstanceType, []string, error) {
	pool, scope, ok := c.pools.Of(nc)
	if !ok {
		return its, nil, nil
	}
	counts, err := pool.Offer(ctx, scope)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the pool of nodeclass %s: %w", nc.Name, err)
	}
	out, exhausted := offerPool(its, counts)
	return out, exhausted, nil
}

// offerPool marks the offerings of types with no machine unavailable, and names them.
func offerPool(its []*cloudprovider.InstanceType, counts map[string]int) ([]*cloudprovider.InstanceType, []string) {
	out := make([]*cloudprovider.InstanceType, 0, len(its))
	var exhausted []string
	for _, it := range its {
		n, listed := counts[it.Name]
		if !listed || n > 0 {
			out = append(out, it)
			continue
		}
		exhausted = append(exhausted, it.Name)
		out = append(out, withAvailability(it, false))
	}
	return out, exhausted
}

// withAvailability is a copy of it whose offerings are all available, or none.
func withAvailability(it *cloudprovider.InstanceType, available bool) *cloudprovider.InstanceType {
	offerings := make(cloudprovider.Offerings, 0, len(it.Offerings))
	for _, o := range it.Offerings {
		oc := *o
		oc.Available = available
		offerings = append(offerings, &oc)
	}
	return &cloudprovider.InstanceType{Name: it.Name, Requirements: it.Requirements, Offerings: offerings,
		Capacity: it.Capacity, VolumeAttachmentLimits: it.VolumeAttachmentLimits, DynamicResources: it.DynamicResources, Overhead: it.Overhead}
}

// leaseFor leases the claim a machine of the chosen type when the class's family is a Pool,
// and records it on the Fulfillment about to be created: its parameters and provider ID.
// An exhausted pool is insufficient capacity.
//
// A claim that holds a machine already (an earlier Create leased it, then failed to write
// its record) gets that machine again, and the record is rebuilt for the machine's type:
// the retry chose another type because the claim's own machine is not free, and a record
// of one type holding a machine of another would launch the wrong node. its are the class's
// instance types before the pool's offers, overlaid those of the claim's NodePool's
// NodeOverlays (chooseOffering).
func (c *CloudProvider) leaseFor(ctx context.Context, nc *v1alpha1.TofuNodeClass, claim *karpv1.NodeClaim, f *v1alpha1.Fulfillment,
	its []*cloudprovider.InstanceType, overlaid map[string]*cloudprovider.InstanceType) (*v1alpha1.Fulfillment, error) {
	pool, scope, ok := c.pools.Of(nc)
	if !ok {
		return f, nil
	}
	lease, err := pool.Lease(ctx, scope, family.PoolClaim{Name: claim.Name, UID: string(claim.UID), NodeType: f.Spec.NodeType})
	if errors.Is(err, family.ErrPoolExhausted) {
		// Not marked unavailable for a while: the pool's count (Offer) says when a machine is
		// back, at once.
		return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("%s: %w", v1alpha1.ReasonPoolExhausted, err))
	}
	if err != nil {
		return nil, fmt.Errorf("leasing a machine of node type %s: %w", f.Spec.NodeType, err)
	}
	if lease.NodeType != "" && lease.NodeType != f.Spec.NodeType {
		if f, err = c.heldRecord(nc, claim, its, overlaid, lease); err != nil {
			return nil, err
		}
	}
	f.Spec.Parameters = lease.Parameters
	if lease.ProviderID != "" {
		f.Spec.ProviderID = lease.ProviderID
	}
	return f, nil
}

// heldRecord is the claim's record for the machine it holds: the cheapest offering of the
// machine's type that fits the claim. The machine is the claim's already, so its offerings
// count as available. A type that fits the claim no longer (the class changed) is a
// CreateError; the lease stays, as the record may exist where the cache does not show it
// yet, and the pool keeper lets it go once the claim is gone.
func (c *CloudProvider) heldRecord(nc *v1alpha1.TofuNodeClass, claim *karpv1.NodeClaim, its []*cloudprovider.InstanceType,
	overlaid map[string]*cloudprovider.InstanceType, lease family.PoolLease) (*v1alpha1.Fulfillment, error) {
	var held []*cloudprovider.InstanceType
	for _, it := range its {
		if it.Name == lease.NodeType {
			held = append(held, withAvailability(it, true))
		}
	}
	ch, err := chooseOffering(nc, held, overlaid, claim)
	if err != nil {
		return nil, cloudprovider.NewCreateError(fmt.Errorf("the claim holds machine %s of node type %s: %w", lease.ProviderID, lease.NodeType, err),
			v1alpha1.ReasonLeasedMachineUnfit, "the claim holds a pool machine of a node type that no longer fits it")
	}
	return c.fulfillmentFor(nc, claim, ch.nodeType, ch.zone, ch.capType, ch.offering.Price)
}
