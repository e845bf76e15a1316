// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// Record writes, once Create has answered (WithRecordsAfterAnswer).
const (
	// recordAttemptTimeout bounds one write of a record.
	recordAttemptTimeout = 30 * time.Second
	// recordBackoffMax bounds the wait between the retries of a failing write.
	recordBackoffMax = 30 * time.Second
	// recordSeenTimeout bounds how long a written record is kept for Create while the cache
	// does not show it yet.
	recordSeenTimeout = time.Minute
)

// records holds the Fulfillments Create decided and answered with but has not written yet,
// and writes them. Create's one write is the record of its decision; made before the answer,
// it costs every answer a round trip to a busy API server (a burst of 100 claims on two
// CPUs: p50 ~0.5 s). Answering first loses nothing:
//   - no machine is made without a Fulfillment: only the Fulfillment controller starts runs;
//   - until the record is in the cache, Create answers again from it, and Delete drops it
//     (a write already sent deletes what it wrote);
//   - a failing write is retried with backoff until it succeeds or the claim is deleted;
//     one that finds an earlier claim's Fulfillment of the same name gives up and deletes the
//     claim, which Karpenter replaces;
//   - a record lost with the process (it ended between the answer and the write) is written
//     again from the launched claim (RecordRecovery).
type records struct {
	kube client.Client
	// cache is where a written record shows up (the informer cache Create reads).
	cache client.Reader

	mu      sync.Mutex
	pending map[string]*pendingRecord
}

type pendingRecord struct {
	f *v1alpha1.Fulfillment
	// written: the API server has it; kept until the cache has it too.
	written bool
	// dropped: its claim was deleted before the write; a write in flight deletes what it
	// wrote.
	dropped bool
}

func newRecords(kube client.Client, cache client.Reader) *records {
	return &records{kube: kube, cache: cache, pending: map[string]*pendingRecord{}}
}

// get returns the record of the claim, if it is pending for this claim (not dropped).
func (r *records) get(name string, uid types.UID) (*v1alpha1.Fulfillment, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.pending[name]
	if !ok || rec.dropped || rec.f.Spec.NodeClaimUID != string(uid) {
		return nil, false
	}
	return rec.f.DeepCopy(), true
}

// has reports whether the claim has a record not written yet or not yet in the cache.
func (r *records) has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pending[name]
	return ok
}

// add keeps f and starts writing it.
func (r *records) add(ctx context.Context, f *v1alpha1.Fulfillment) {
	rec := &pendingRecord{f: f.DeepCopy()}
	r.mu.Lock()
	r.pending[f.Name] = rec
	r.mu.Unlock()
	go r.write(context.WithoutCancel(ctx), rec)
}

// drop forgets the claim's record, and reports whether there was one that had not been
// written: Delete then has nothing to delete.
func (r *records) drop(name string, uid types.UID) (unwritten bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.pending[name]
	if !ok || rec.f.Spec.NodeClaimUID != string(uid) || rec.written {
		return false
	}
	rec.dropped = true
	return true
}

// write writes the record until it is written, dropped or found to belong to another claim,
// then keeps it until the cache has it.
func (r *records) write(ctx context.Context, rec *pendingRecord) {
	logger := log.FromContext(ctx).WithValues("fulfillment", rec.f.Name)
	defer r.forget(rec)
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		dropped := rec.dropped
		r.mu.Unlock()
		if dropped {
			return
		}
		err := r.create(ctx, rec.f.DeepCopy())
		if err == nil {
			break
		}
		if owner, ok := asOtherClaims(err); ok {
			logger.Error(err, "the claim's decision cannot be recorded: an earlier claim's fulfillment of that name is still being destroyed; replacing the claim", "earlierClaim", owner)
			r.replace(ctx, rec.f)
			return
		}
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			logger.Error(err, "the API server refuses the claim's record; replacing the claim")
			r.replace(ctx, rec.f)
			return
		}
		if !r.claimExists(ctx, rec.f) {
			return // deleted without a Delete call (it never launched): nothing to record
		}
		wait := min(time.Duration(1<<min(attempt, 9))*100*time.Millisecond, recordBackoffMax)
		logger.Error(err, "recording the claim's decision failed; retrying", "in", wait)
		time.Sleep(wait)
	}
	r.mu.Lock()
	rec.written = true
	dropped := rec.dropped
	r.mu.Unlock()
	if dropped {
		// Deleted while the write was on its way: nothing has run for it yet, and the
		// finalizer destroys whatever starts meanwhile.
		if err := r.kube.Delete(ctx, rec.f.DeepCopy()); client.IgnoreNotFound(err) != nil {
			logger.Error(err, "deleting the fulfillment of a deleted claim; its controller deletes it once it sees the claim gone")
		}
		return
	}
	// Create reads the cache; until it shows the record, Create answers from here.
	deadline := time.Now().Add(recordSeenTimeout)
	for time.Now().Before(deadline) && r.cache.Get(ctx, client.ObjectKeyFromObject(rec.f), &v1alpha1.Fulfillment{}) != nil {
		time.Sleep(50 * time.Millisecond)
	}
}

// create writes f; nil also when the API server has it already for the same claim.
func (r *records) create(ctx context.Context, f *v1alpha1.Fulfillment) error {
	ctx, cancel := context.WithTimeout(ctx, recordAttemptTimeout)
	defer cancel()
	err := r.kube.Create(ctx, f)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	got := &v1alpha1.Fulfillment{}
	if err := r.kube.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
		return fmt.Errorf("reading fulfillment: %w", err)
	}
	if got.Spec.NodeClaimUID != f.Spec.NodeClaimUID {
		return &otherClaimsRecord{name: f.Name, owner: got.Spec.NodeClaimUID}
	}
	return nil
}

// otherClaimsRecord: the name is taken by an earlier claim's Fulfillment.
type otherClaimsRecord struct{ name, owner string }

func (e *otherClaimsRecord) Error() string {
	return fmt.Sprintf("fulfillment %s belongs to another nodeclaim (uid %s)", e.name, e.owner)
}

func asOtherClaims(err error) (string, bool) {
	if e, ok := err.(*otherClaimsRecord); ok {
		return e.owner, true
	}
	return "", false
}

// claimExists reports whether f's claim may still exist (a failed read counts as yes).
func (r *records) claimExists(ctx context.Context, f *v1alpha1.Fulfillment) bool {
	claim := &karpv1.NodeClaim{}
	err := r.cache.Get(ctx, client.ObjectKey{Name: f.Name}, claim)
	return !apierrors.IsNotFound(err) && (err != nil || string(claim.UID) == f.Spec.NodeClaimUID)
}

// replace deletes the claim whose decision could not be recorded; Karpenter makes another.
func (r *records) replace(ctx context.Context, f *v1alpha1.Fulfillment) {
	claim := &karpv1.NodeClaim{}
	if err := r.kube.Get(ctx, client.ObjectKey{Name: f.Name}, claim); err != nil || string(claim.UID) != f.Spec.NodeClaimUID {
		return
	}
	if err := r.kube.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); client.IgnoreNotFound(err) != nil {
		log.FromContext(ctx).Error(err, "deleting the claim whose decision could not be recorded", "nodeclaim", f.Name)
	}
}

// forget drops rec, unless another record of the name has replaced it.
func (r *records) forget(rec *pendingRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[rec.f.Name] == rec {
		delete(r.pending, rec.f.Name)
	}
}
