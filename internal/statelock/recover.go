// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ErrLockChanged: the lock is no longer held by the holder that was judged stale.
var ErrLockChanged = errors.New("the state lock changed hands")

// StaleLockRecoveries counts recovered state locks (a runner was killed while it held one).
var StaleLockRecoveries = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "fulfiller",
	Name:      "state_lock_recoveries_total",
	Help:      "State locks released because the run that held them provably no longer exists.",
}, []string{"node_class"})

func init() {
	metrics.Registry.MustRegister(StaleLockRecoveries)
}

// ReleaseStale releases a claim's lock held by holder, as `tofu force-unlock <holder.ID>`
// would: the Lease's holder and lock info are cleared. The caller must have established that
// holder's run is gone. The Lease is read from r (the API server, not a cache) and the update
// carries its resourceVersion, so a lock taken by someone else in between is never released:
// that, or a lock no longer held by holder, returns ErrLockChanged.
func ReleaseStale(ctx context.Context, r client.Reader, c client.Client, namespace string, key Key, holder *Holder) error {
	lease := &coordinationv1.Lease{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: key.LeaseName()}, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return ErrLockChanged
		}
		return fmt.Errorf("reading lock lease: %w", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder.ID {
		return ErrLockChanged
	}
	lease.Spec.HolderIdentity = nil
	delete(lease.Annotations, lockInfoAnnotation)
	if err := c.Update(ctx, lease); err != nil {
		if apierrors.IsConflict(err) {
			return ErrLockChanged
		}
		return fmt.Errorf("releasing lock %s: %w", key.LeaseName(), err)
	}
	return nil
}
