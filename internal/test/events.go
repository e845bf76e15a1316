// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package test

import (
	"sync"

	"sigs.k8s.io/karpenter/pkg/events"
)

// Recorder is an events.Recorder that keeps what is published, in order.
type Recorder struct {
	mu     sync.Mutex
	events []events.Event
}

var _ events.Recorder = (*Recorder)(nil)

func (r *Recorder) Publish(evts ...events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, evts...)
}

// Events returns what was published, oldest first.
func (r *Recorder) Events() []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]events.Event(nil), r.events...)
}

// Reasons returns the reasons of what was published, oldest first.
func (r *Recorder) Reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.events))
	for _, e := range r.events {
		out = append(out, e.Reason)
	}
	return out
}

// Len counts what was published.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// Reset forgets what was published.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = nil
}
