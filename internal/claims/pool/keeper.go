// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package pool keeps the pools of the classes whose family leases machines from a finite pool
// (family.Pool): it calls each class's Pool every interval and writes what it reports as the
// class's PoolReady condition.
package pool

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
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Keeper calls, every interval, the Pool of each class whose family has one (family.Pool
// Keep), and writes what it reports as the class's PoolReady condition (informational: Ready
// is not composed of it), with its events.
type Keeper struct {
	kube            client.Client
	pools           classconfig.Pools
	clock           clock.Clock
	recorder        events.Recorder
	secretNamespace string
	cluster         string
	interval        time.Duration
}

// Options are what the Keeper is built from.
type Options struct {
	Kube client.Client
	// APIReader reads from the API server (the leases' compare-and-swap).
	APIReader client.Reader
	Clock     clock.Clock
	Recorder  events.Recorder
	Families  family.Registry
	// SecretNamespace holds the Secrets classes name (their credentials); StateNamespace the
	// pools' leases.
	SecretNamespace, StateNamespace string
	// Cluster is this cluster's name (family.Scope).
	Cluster  string
	Interval time.Duration
}

// NewKeeper builds the keeper.
func NewKeeper(o Options) *Keeper {
	return &Keeper{kube: o.Kube, pools: classconfig.Pools{Families: o.Families, Reader: o.APIReader, Writer: o.Kube, StateNamespace: o.StateNamespace},
		clock: o.Clock, recorder: o.Recorder, secretNamespace: o.SecretNamespace, cluster: o.Cluster, interval: o.Interval}
}

// Register runs the keeper on the leader, every interval.
func (k *Keeper) Register(_ context.Context, m manager.Manager) error {
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
func (k *Keeper) KeepAll(ctx context.Context) error {
	list := &v1alpha1.TofuNodeClassList{}
	if err := k.kube.List(ctx, list); err != nil {
		return fmt.Errorf("listing nodeclasses: %w", err)
	}
	var errs []error
	counts := map[string]classMachines{}
	for i := range list.Items {
		nc := &list.Items[i]
		machines, err := k.keep(ctx, nc)
		if err != nil {
			errs = append(errs, fmt.Errorf("nodeclass %s: %w", nc.Name, err))
			machines = poolMachines.last(nc.Name) // what the last round found stands
		}
		if machines != nil {
			counts[nc.Name] = classMachines{family: nc.Spec.Family, states: machines}
		}
	}
	poolMachines.set(counts)
	return errors.Join(errs...)
}

// keep keeps one class's pool and returns its machines by state (nil: it has no pool, or
// they could not be counted).
func (k *Keeper) keep(ctx context.Context, nc *v1alpha1.TofuNodeClass) (map[string]int, error) {
	pool, scope, ok := k.pools.Of(nc)
	if !ok || !nc.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	var report family.PoolReport
	env, err := classconfig.ReadCredentials(ctx, k.pools.Reader, k.secretNamespace, nc.Spec.Credentials)
	if ce, ok := classconfig.AsConfigError(err); ok {
		report = family.PoolReport{Reason: v1alpha1.ReasonPoolUnchecked, Message: "waiting for the credentials: " + ce.Message}
	} else if err != nil {
		return nil, err
	} else {
		scope.Env, scope.Cluster = env, k.cluster
		if report, err = pool.Keep(ctx, scope, k.live); err != nil {
			return nil, err
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
	classconfig.ShortenConditions(updated.Status.Conditions)
	if !equality.Semantic.DeepEqual(nc.Status, updated.Status) {
		err := k.kube.Status().Patch(ctx, updated, client.MergeFromWithOptions(nc, client.MergeFromWithOptimisticLock{}))
		if err != nil && !apierrors.IsConflict(err) { // a conflict: the next round writes it
			return nil, fmt.Errorf("writing nodeclass status: %w", err)
		}
	}
	for _, e := range report.Events {
		eventType := corev1.EventTypeNormal
		if e.Warning {
			eventType = corev1.EventTypeWarning
		}
		k.recorder.Publish(classconfig.ShortenEvents([]events.Event{{InvolvedObject: updated, Type: eventType, Reason: e.Reason, Message: e.Message,
			DedupeValues: []string{string(nc.UID), e.Message}}})...)
	}
	return report.Machines, nil
}

// live reports whether a claim exists: its Fulfillment, or (between a lease and the
// Fulfillment's creation) its NodeClaim, with that UID.
func (k *Keeper) live(ctx context.Context, name, uid string) (bool, error) {
	f := &v1alpha1.Fulfillment{}
	err := k.pools.Reader.Get(ctx, client.ObjectKey{Name: name}, f)
	switch {
	case err == nil && f.Spec.NodeClaimUID == uid:
		return true, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading fulfillment %s: %w", name, err)
	}
	claim := &karpv1.NodeClaim{}
	err = k.pools.Reader.Get(ctx, client.ObjectKey{Name: name}, claim)
	switch {
	case err == nil:
		return string(claim.UID) == uid, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("reading nodeclaim %s: %w", name, err)
}
