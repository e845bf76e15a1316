// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package billing decides whether an empty node Karpenter wants to consolidate is worth
// keeping until its paid period ends: Hetzner Cloud bills a server by the started hour and
// Robot by the month, so deleting an empty node early saves nothing, and buying another one
// within the period pays twice.
package billing

import (
	"fmt"
	"time"
)

// Node is what the decision reads of one node.
type Node struct {
	// Launched is when its billing started (the apply that made the machine succeeded).
	Launched time.Time
	// Empty: Karpenter would consolidate it as empty (no pods but daemons).
	Empty bool
	// Drifted, Expired, Unhealthy: Karpenter replaces it whatever it cost.
	Drifted, Expired, Unhealthy bool
}

// Policy is a class's billing-aware scale-down: Period is how the family bills (an hour for
// Hetzner Cloud, a month for Robot), Margin how long before a period's end a held node is let
// go, so that it is deleted before the next period starts.
type Policy struct {
	Period time.Duration
	Margin time.Duration
}

// Decision is whether to hold a node back from consolidation, until when, and why.
type Decision struct {
	Hold bool
	// Until is when the hold ends (the paid period's end less the margin); zero without hold.
	Until time.Time
	// PaidUntil is the end of the paid period now falls in; zero when the policy did not
	// look at the period (no period, or a node it does not hold whatever it paid).
	PaidUntil time.Time
	// Cause is why, one of a fixed set; Reason says it in one line for the claim.
	Cause  Cause
	Reason string
}

// Cause is why a node is held or not.
type Cause string

const (
	// Held: empty, within its paid period, before the margin.
	Held Cause = "Held"
	// PeriodEnding: empty, and within the margin before its paid period ends: let go.
	PeriodEnding Cause = "PeriodEnding"
	// NoPeriod: the policy has no billing period.
	NoPeriod Cause = "NoPeriod"
	// Drifted, Expired, Unhealthy: Karpenter replaces the node whatever it cost.
	Drifted   Cause = "Drifted"
	Expired   Cause = "Expired"
	Unhealthy Cause = "Unhealthy"
	// NotEmpty: Karpenter would not consolidate the node as empty.
	NotEmpty Cause = "NotEmpty"
)

// PaidUntil is the end of the billing period that now falls in, for a node launched at
// launched: the paid time a delete at now would forfeit ends there.
func (p Policy) PaidUntil(launched, now time.Time) time.Time {
	if !now.After(launched) {
		return launched.Add(p.Period)
	}
	periods := (now.Sub(launched) + p.Period - 1) / p.Period
	return launched.Add(periods * p.Period)
}

// Decide is the policy's decision for a node at now (pure).
func (p Policy) Decide(n Node, now time.Time) Decision {
	switch {
	case p.Period <= 0:
		return Decision{Cause: NoPeriod, Reason: "no billing period"}
	case n.Drifted:
		return Decision{Cause: Drifted, Reason: "drifted: Karpenter replaces it"}
	case n.Expired:
		return Decision{Cause: Expired, Reason: "expired: Karpenter replaces it"}
	case n.Unhealthy:
		return Decision{Cause: Unhealthy, Reason: "unhealthy: its Node is not Ready"}
	case !n.Empty:
		return Decision{Cause: NotEmpty, Reason: "not empty"}
	}
	paid := p.PaidUntil(n.Launched, now)
	until := paid.Add(-p.Margin)
	if !now.Before(until) {
		return Decision{Cause: PeriodEnding, PaidUntil: paid,
			Reason: fmt.Sprintf("empty, and its paid period ends at %s: let go", paid.UTC().Format(time.RFC3339))}
	}
	return Decision{Hold: true, Until: until, PaidUntil: paid, Cause: Held,
		Reason: fmt.Sprintf("empty, but paid until %s: kept until %s", paid.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))}
}
