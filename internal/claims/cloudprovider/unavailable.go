// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// UnavailableOfferingsTTL is how long an offering that failed for lack of capacity is reported
// unavailable, so that Karpenter plans onto other types meanwhile.
const UnavailableOfferingsTTL = 3 * time.Minute

// UnavailableOfferings remembers (type, zone, capacity type) offerings that recently failed
// for lack of capacity.
type UnavailableOfferings struct {
	clock   clock.Clock
	ttl     time.Duration
	mu      sync.RWMutex
	entries map[string]time.Time
	seq     uint64
}

func NewUnavailableOfferings(clk clock.Clock, ttl time.Duration) *UnavailableOfferings {
	return &UnavailableOfferings{clock: clk, ttl: ttl, entries: map[string]time.Time{}}
}

func offeringKey(nodeType, zone, capacityType string) string {
	return nodeType + "/" + zone + "/" + capacityType
}

// MarkUnavailable records an offering as unavailable for the TTL.
func (u *UnavailableOfferings) MarkUnavailable(nodeType, zone, capacityType string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.entries[offeringKey(nodeType, zone, capacityType)] = u.clock.Now().Add(u.ttl)
	u.seq++
}

// IsUnavailable reports whether an offering is still marked.
func (u *UnavailableOfferings) IsUnavailable(nodeType, zone, capacityType string) bool {
	if u == nil {
		return false
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	until, ok := u.entries[offeringKey(nodeType, zone, capacityType)]
	return ok && u.clock.Now().Before(until)
}

// SeqNum changes whenever an offering is marked; caches of instance types key on it.
func (u *UnavailableOfferings) SeqNum() uint64 {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.seq
}
