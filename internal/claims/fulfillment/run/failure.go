// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import "github.com/fulfiller-sh/fulfiller/internal/tfrunner"

// FailureDecision is what a failed run means for its claim.
type FailureDecision struct {
	// Reason of the operation's condition (and of the RunFailed event): the class's name, so
	// the reason says what broke without reading the run log.
	Reason string
	// Retry: another run after a backoff, while attempts remain (the condition stays Unknown
	// meanwhile); afterwards, or without Retry, the condition turns False and the claim is
	// replaced.
	Retry bool
	// MarkUnavailable: the offering (type, zone, capacity type) is marked unavailable for a
	// while, so Karpenter plans the pods onto another one instead of the same failing one.
	MarkUnavailable bool
}

// DecideApplyFailure maps a failure class of an apply to what happens (the failure table of
// docs/concepts.md, "Phases, failures and retries"). Capacity and quota mark the offering
// unavailable; so do terminal failures (invalid module or inputs, bad credentials): the same
// inputs would fail again, and replacing claims in a hot loop helps nobody. Transient errors,
// a held lock, a deadline and unclassified failures are retried. A cancelled run is not:
// whoever cancelled it meant it.
func DecideApplyFailure(class tfrunner.ErrorClass) FailureDecision {
	if class == "" {
		class = tfrunner.Unknown
	}
	return FailureDecision{
		Reason:          string(class),
		Retry:           class.Retryable() || class == tfrunner.Unknown,
		MarkUnavailable: class.InsufficientCapacity() || class.Terminal(),
	}
}

// DecideDestroyFailure: a failed destroy is retried, whatever its class, without a bound: the
// machine must go, and the claim waits for it (its Fulfillment keeps the finalizer).
func DecideDestroyFailure(class tfrunner.ErrorClass) FailureDecision {
	if class == "" {
		class = tfrunner.Unknown
	}
	return FailureDecision{Reason: string(class), Retry: true}
}
