// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package billing

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

func TestDecide(t *testing.T) {
	hour := Policy{Period: time.Hour, Margin: 5 * time.Minute}
	cases := []struct {
		name   string
		policy Policy
		node   Node
		at     time.Duration
		hold   bool
		until  time.Duration
		cause  Cause
	}{
		{"empty early in its hour is held", hour, Node{Launched: t0, Empty: true}, 10 * time.Minute, true, 55 * time.Minute, Held},
		{"empty within the margin is let go", hour, Node{Launched: t0, Empty: true}, 56 * time.Minute, false, 0, PeriodEnding},
		{"at the hour's end it is let go: the hour is paid, the next not started", hour, Node{Launched: t0, Empty: true}, time.Hour, false, 0, PeriodEnding},
		{"second hour", hour, Node{Launched: t0, Empty: true}, 70 * time.Minute, true, 115 * time.Minute, Held},
		{"drifted goes", hour, Node{Launched: t0, Empty: true, Drifted: true}, 10 * time.Minute, false, 0, Drifted},
		{"expired goes", hour, Node{Launched: t0, Empty: true, Expired: true}, 10 * time.Minute, false, 0, Expired},
		{"unhealthy goes", hour, Node{Launched: t0, Empty: true, Unhealthy: true}, 10 * time.Minute, false, 0, Unhealthy},
		{"not empty is not the policy's", hour, Node{Launched: t0}, 10 * time.Minute, false, 0, NotEmpty},
		{"no period, no hold", Policy{}, Node{Launched: t0, Empty: true}, 10 * time.Minute, false, 0, NoPeriod},
		{"a month of Robot", Policy{Period: 730 * time.Hour, Margin: time.Hour}, Node{Launched: t0, Empty: true}, 24 * time.Hour, true, 729 * time.Hour, Held},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.policy.Decide(c.node, t0.Add(c.at))
			if d.Hold != c.hold || d.Cause != c.cause || d.Reason == "" {
				t.Fatalf("got %+v, want hold %v (%s)", d, c.hold, c.cause)
			}
			if c.hold && !d.Until.Equal(t0.Add(c.until)) {
				t.Errorf("held until %s, want %s", d.Until, t0.Add(c.until))
			}
		})
	}
}

// TestSimulatedDay replays a day of bursty demand (a seeded trace, one node per unit of
// demand, minute steps) with Karpenter's empty consolidation deleting a node as soon as it
// is empty, and with the policy holding it until shortly before its paid hour ends; a held
// empty node takes new demand before a new one is bought. It reports the machine-hours paid
// (each node billed by the started hour, as Hetzner Cloud bills).
func TestSimulatedDay(t *testing.T) {
	demand := burstyDay(rand.New(rand.NewPCG(31, 2026)))
	policy := Policy{Period: time.Hour, Margin: 5 * time.Minute}
	without := simulate(demand, nil)
	with := simulate(demand, &policy)
	t.Logf("a day of bursty demand (peak %d nodes): %d machine-hours paid without the policy, %d with it", peak(demand), without, with)
	if with >= without {
		t.Errorf("the policy paid %d machine-hours, no fewer than %d without it", with, without)
	}
	// The policy never serves less demand: every minute's demand had a node in both runs
	// (simulate fails otherwise), so the lower bound is the demand's own machine-minutes.
	var minutes int
	for _, d := range demand {
		minutes += d
	}
	if with*60 < minutes {
		t.Errorf("%d machine-hours paid for %d machine-minutes of demand", with, minutes)
	}
}

// burstyDay is the demand of each minute of a day: a base of 2 nodes during working hours,
// with bursts of 1 to 6 nodes lasting 3 to 20 minutes at random times.
func burstyDay(r *rand.Rand) []int {
	demand := make([]int, 24*60)
	for m := range demand {
		if h := m / 60; h >= 8 && h < 18 {
			demand[m] = 2
		}
	}
	for range 60 {
		start, length, size := r.IntN(len(demand)), 3+r.IntN(18), 1+r.IntN(6)
		for m := start; m < min(start+length, len(demand)); m++ {
			demand[m] += size
		}
	}
	return demand
}

func peak(demand []int) int {
	var p int
	for _, d := range demand {
		p = max(p, d)
	}
	return p
}

// simulate runs the trace and returns the machine-hours paid: each node costs the hours it
// started, from its launch to its deletion (or the end of the day).
func simulate(demand []int, p *Policy) int {
	type node struct{ launched time.Time }
	var nodes []node
	var paid int
	bill := func(n node, end time.Time) {
		paid += int((end.Sub(n.launched) + time.Hour - 1) / time.Hour)
	}
	for m, want := range demand {
		now := t0.Add(time.Duration(m) * time.Minute)
		for len(nodes) < want {
			nodes = append(nodes, node{launched: now})
		}
		// The nodes beyond the demand are empty; the oldest keep the pods.
		var kept []node
		for i, n := range nodes {
			if i < want {
				kept = append(kept, n)
				continue
			}
			if p != nil && p.Decide(Node{Launched: n.launched, Empty: true}, now).Hold {
				kept = append(kept, n)
				continue
			}
			bill(n, now)
		}
		nodes = kept
	}
	end := t0.Add(time.Duration(len(demand)) * time.Minute)
	for _, n := range nodes {
		bill(n, end)
	}
	return paid
}
