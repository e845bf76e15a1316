// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Pools: families whose machines are a finite pool leased to one claim at a time
// (family.Pool). Create leases a machine and records what the module needs on the
// Fulfillment; the destroy gives it back; the node types' offerings are available only while
// the pool has a machine for them; the PoolKeeper looks after each class's pool.

// pools is what the generic code needs to call a class's Pool.
type pools struct {
	families family.Registry
	// reader reads from the API server (the leases' compare-and-swap), writer writes.
	reader         client.Reader
	writer         client.Client
	stateNamespace string
}

// poolOf returns the class's Pool and its scope (without credentials); false when the
// class's family has none.
func (p *pools) poolOf(nc *v1alpha1.TofuNodeClass) (family.Pool, family.Scope, bool) {
	if p == nil {
		return nil, family.Scope{}, false
	}
	f, ok := classFamily(p.families, nc)
	if !ok {
		return nil, family.Scope{}, false
	}
	pool, ok := f.(family.Pool)
	return pool, family.Scope{Class: nc, Reader: p.reader, Writer: p.writer, StateNamespace: p.stateNamespace}, ok
}

// WithPools lets the CloudProvider lease machines of the classes whose family is a Pool;
// reader must read from the API server.
func (c *CloudProvider) WithPools(families family.Registry, reader client.Reader, writer client.Client, stateNamespace string) *CloudProvider {
	c.pools = &pools{families: families, reader: reader, writer: writer, stateNamespace: stateNamespace}
	return c
}

// withPoolOffers makes a pool class's offerings unavailable for the node types its pool has
// no machine for now. The instance types are copied: the cached ones stay as they are.
// It also names the types whose pool is exhausted.
func (c *CloudProvider) withPoolOffers(ctx context.Context, nc *v1alpha1.TofuNodeClass, its []*cloudprovider.InstanceType) ([]*cloudprovider.InstanceType, []string, error) {
	pool, scope, ok := c.pools.poolOf(nc)
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
		offerings := make(cloudprovider.Offerings, 0, len(it.Offerings))
		for _, o := range it.Offerings {
			oc := *o
			oc.Available = false
			offerings = append(offerings, &oc)
		}
		out = append(out, &cloudprovider.InstanceType{Name: it.Name, Requirements: it.Requirements, Offerings: offerings,
			Capacity: it.Capacity, VolumeAttachmentLimits: it.VolumeAttachmentLimits, DynamicResources: it.DynamicResources, Overhead: it.Overhead})
	}
	return out, exhausted
}

// leaseFor leases the claim a machine of the chosen type when the class's family is a Pool,
// and records it on the Fulfillment about to be created: its parameters and provider ID.
// An exhausted pool is insufficient capacity.
func (c *CloudProvider) leaseFor(ctx context.Context, nc *v1alpha1.TofuNodeClass, claim *karpv1.NodeClaim, f *v1alpha1.Fulfillment) error {
	pool, scope, ok := c.pools.poolOf(nc)
	if !ok {
		return nil
	}
	lease, err := pool.Lease(ctx, scope, family.PoolClaim{Name: claim.Name, UID: string(claim.UID), NodeType: f.Spec.NodeType})
	if errors.Is(err, family.ErrPoolExhausted) {
		// Not marked unavailable for a while: the pool's count (Offer) says when a machine is
		// back, at once.
		return cloudprovider.NewInsufficientCapacityError(fmt.Errorf("%s: %w", v1alpha1.ReasonPoolExhausted, err))
	}
	if err != nil {
		return fmt.Errorf("leasing a machine of node type %s: %w", f.Spec.NodeType, err)
	}
	f.Spec.Parameters = lease.Parameters
	if lease.ProviderID != "" {
		f.Spec.ProviderID = lease.ProviderID
	}
	return nil
}

// releasePool gives the claim's machine back to its class's pool once its destroy
// succeeded. With the class gone, the PoolKeeper of no class can see the lease; it stays
// until the class is back.
func (c *FulfillmentController) releasePool(ctx context.Context, s *claimState) error {
	p := &pools{families: c.opts.Families, reader: c.apiReader, writer: c.kube, stateNamespace: c.poolNamespace()}
	pool, scope, ok := p.poolOf(s.nc)
	if !ok {
		return nil
	}
	if err := pool.Release(ctx, scope, family.PoolClaim{Name: s.f.Name, UID: s.f.Spec.NodeClaimUID, NodeType: s.f.Spec.NodeType}); err != nil {
		return fmt.Errorf("releasing the claim's machine to the pool: %w", err)
	}
	return nil
}

// poolNamespace is where pools keep their leases: the controller's state namespace.
func (c *FulfillmentController) poolNamespace() string {
	if c.opts.StateNamespace != "" {
		return c.opts.StateNamespace
	}
	return c.opts.Namespace
}

// PoolKeeper calls, every interval, the Pool of each class whose family has one (family.Pool
// Keep), and writes what it reports as the class's PoolReady condition (informational: Ready
// is not composed of it), with its events.
type PoolKeeper struct {
	kube            client.Client
	pools           pools
	clock           clock.Clock
	recorder        events.Recorder
	secretNamespace string
	cluster         string
	interval        time.Duration
}

// NewPoolKeeper builds the keeper; reader reads from the API server.
func NewPoolKeeper(kube client.Client, reader client.Reader, clk clock.Clock, recorder events.Recorder, families family.Registry,
	secretNamespace, stateNamespace, cluster string, interval time.Duration) *PoolKeeper {
	return &PoolKeeper{kube: kube, pools: pools{families: families, reader: reader, writer: kube, stateNamespace: stateNamespace},
		clock: clk, recorder: recorder, secretNamespace: secretNamespace, cluster: cluster, interval: interval}
}

// Register runs the keeper on the leader, every interval.
func (k *PoolKeeper) Register(_ context.Context, m manager.Manager) error {
	return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for {
			if err := k.KeepAll(ctx); err != nil && ctx.Err() == nil {
				log.FromContext(ctx).Error(err, "keeping the pools")
			}
			select {
			case <-ctx.Done():
				return nil
			case <-k.clock.After(k.interval):
			}
		}
	}))
}

// KeepAll keeps the pool of every class that has one.
func (k *PoolKeeper) KeepAll(ctx context.Context) error {
	list := &v1alpha1.TofuNodeClassList{}
	if err := k.kube.List(ctx, list); err != nil {
		return fmt.Errorf("listing nodeclasses: %w", err)
	}
	var errs []error
	for i := range list.Items {
		if err := k.keep(ctx, &list.Items[i]); err != nil {
			errs = append(errs, fmt.Errorf("nodeclass %s: %w", list.Items[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

func (k *PoolKeeper) keep(ctx context.Context, nc *v1alpha1.TofuNodeClass) error {
	pool, scope, ok := k.pools.poolOf(nc)
	if !ok || !nc.DeletionTimestamp.IsZero() {
		return nil
	}
	var report family.PoolReport
	env, err := readCredentials(ctx, k.pools.reader, k.secretNamespace, nc.Spec.Credentials)
	if ce, ok := asConfigError(err); ok {
		report = family.PoolReport{Reason: v1alpha1.ReasonPoolUnchecked, Message: "waiting for the credentials: " + ce.Message}
	} else if err != nil {
		return err
	} else {
		scope.Env, scope.Cluster = env, k.cluster
		if report, err = pool.Keep(ctx, scope, k.live); err != nil {
			return err
		}
	}
	updated := nc.DeepCopy()
	conds := updated.StatusConditions(status.WithClock(k.clock))
	switch {
	case report.Healthy:
		conds.SetTrueWithReason(v1alpha1.ConditionPoolReady, report.Reason, report.Message)
	case report.Reason == v1alpha1.ReasonPoolUnchecked:
		conds.SetUnknownWithReason(v1alpha1.ConditionPoolReady, report.Reason, report.Message)
	default:
		conds.SetFalse(v1alpha1.ConditionPoolReady, report.Reason, report.Message)
	}
	shortenMessages(updated.Status.Conditions)
	if !equality.Semantic.DeepEqual(nc.Status, updated.Status) {
		err := k.kube.Status().Patch(ctx, updated, client.MergeFromWithOptions(nc, client.MergeFromWithOptimisticLock{}))
		if err != nil && !apierrors.IsConflict(err) { // a conflict: the next round writes it
			return fmt.Errorf("writing nodeclass status: %w", err)
		}
	}
	for _, e := range report.Events {
		eventType := corev1.EventTypeNormal
		if e.Warning {
			eventType = corev1.EventTypeWarning
		}
		k.recorder.Publish(shortenEventMessages([]events.Event{{InvolvedObject: updated, Type: eventType, Reason: e.Reason, Message: e.Message,
			DedupeValues: []string{string(nc.UID), e.Message}}})...)
	}
	return nil
}

// live reports whether a claim exists: its Fulfillment, or (between a lease and the
// Fulfillment's creation) its NodeClaim, with that UID.
func (k *PoolKeeper) live(ctx context.Context, name, uid string) (bool, error) {
	f := &v1alpha1.Fulfillment{}
	err := k.pools.reader.Get(ctx, client.ObjectKey{Name: name}, f)
	switch {
	case err == nil && f.Spec.NodeClaimUID == uid:
		return true, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading fulfillment %s: %w", name, err)
	}
	claim := &karpv1.NodeClaim{}
	err = k.pools.reader.Get(ctx, client.ObjectKey{Name: name}, claim)
	switch {
	case err == nil:
		return string(claim.UID) == uid, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("reading nodeclaim %s: %w", name, err)
}
