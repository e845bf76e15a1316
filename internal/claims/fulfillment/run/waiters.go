// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// wakeBuffer bounds the claims waiting to be woken; a wake that does not fit is dropped,
// and that claim looks again at its recheck.
const wakeBuffer = 1024

// waiters wakes claims at once instead of at their next recheck: the claims whose run the
// executor did not admit for want of a runner, in the order they asked, the longest-waiting
// first, one each time a run ends; and the claim of a run the executor saw end. The
// rechecks (AdmissionRecheck, PollInterval) stay, for what nobody wakes.
type waiters struct {
	mu      sync.Mutex
	waiting []string
	wake    chan event.GenericEvent
}

func newWaiters() *waiters {
	return &waiters{wake: make(chan event.GenericEvent, wakeBuffer)}
}

// add queues a claim that waits for a runner (once).
func (w *waiters) add(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.waiting, name) {
		w.waiting = append(w.waiting, name)
	}
}

// remove takes a claim out of the queue: its run started, or it waits no more.
func (w *waiters) remove(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting = slices.DeleteFunc(w.waiting, func(s string) bool { return s == name })
}

// wakeNext wakes the claim that has waited longest for a runner, if any: the run that ended
// freed one.
func (w *waiters) wakeNext() {
	w.mu.Lock()
	if len(w.waiting) == 0 {
		w.mu.Unlock()
		return
	}
	name := w.waiting[0]
	w.waiting = w.waiting[1:]
	w.mu.Unlock()
	w.enqueue(name)
}

// enqueue has the Fulfillment of that name reconciled soon, without blocking.
func (w *waiters) enqueue(name string) {
	select {
	case w.wake <- event.GenericEvent{Object: &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
	default:
	}
}
