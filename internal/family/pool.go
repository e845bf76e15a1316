// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package family

import (
	"context"
	"errors"
)

// Pool (optional) is a family whose machines are a finite pool rented ahead of need (Hetzner
// Robot dedicated servers): each is leased to one claim at a time, never two. Create leases
// one (Lease), the destroy gives it back (Release), and a keeper looks after the pool in the
// background (Keep). Calls get a Scope with Reader, Writer and StateNamespace set; Lease, Release and
// Offer also without the class's credentials (Env may be empty).
type Pool interface {
	// Offer says, per node type of the class, how many machines a claim could get now. A type
	// with none has its offerings unavailable; a type not in the map is unaffected.
	Offer(ctx context.Context, s Scope) (map[string]int, error)
	// Lease leases a machine of the node type to the claim and returns what the module needs
	// to activate it. Leasing again for the same claim returns the same machine, whatever
	// node type it asks for this time (an earlier Create leased it and then failed), and the
	// lease names that machine's type. No machine is ErrPoolExhausted (wrapped, with a
	// message that says why).
	Lease(ctx context.Context, s Scope, c PoolClaim) (PoolLease, error)
	// Release gives the claim's machine back after its destroy succeeded (or when nothing
	// was ever applied). Releasing what the claim does not hold is no error.
	Release(ctx context.Context, s Scope, c PoolClaim) error
	// Keep looks after the class's pool: machines back to service, ahead-of-need installs,
	// quarantine, leases whose claims are gone (live says whether a claim exists). It reports
	// the pool's condition.
	Keep(ctx context.Context, s Scope, live func(ctx context.Context, claim, uid string) (bool, error)) (PoolReport, error)
}

// PoolClaim is the claim a pool machine is leased to.
type PoolClaim struct {
	Name, UID string
	NodeType  string
}

// PoolLease is a leased machine: the module's parameters that name it and how to activate
// it, the Node's provider ID, and the machine's node type.
type PoolLease struct {
	Parameters map[string]string
	ProviderID string
	NodeType   string
}

// PoolReport is what Keep found: the class's pool condition (v1alpha1.ConditionPoolReady)
// and events about it.
type PoolReport struct {
	Healthy         bool
	Reason, Message string
	Events          []PoolEvent
	// Machines counts the pool's machines by state (PoolFree, PoolStandby, PoolLeased,
	// PoolQuarantined); nil when the pool could not be read.
	Machines map[string]int
}

// States of a pool's machines in PoolReport.Machines.
const (
	// PoolFree: in the pool, not leased, not ready to be activated at once (to be installed).
	PoolFree = "free"
	// PoolStandby: installed ahead of need, ready to be activated at once (warm).
	PoolStandby = "standby"
	// PoolLeased: leased to a claim.
	PoolLeased = "leased"
	// PoolQuarantined: taken out of service after failures, until a person clears it.
	PoolQuarantined = "quarantined"
)

// PoolEvent is an event on the class (a machine quarantined).
type PoolEvent struct {
	Warning         bool
	Reason, Message string
}

// ErrPoolExhausted: no machine of the type can be leased now.
var ErrPoolExhausted = errors.New("no free machine in the pool")
