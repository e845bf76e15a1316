package claims

import "github.com/fulfiller-sh/fulfiller/internal/tfrunner"

// applyFailure is what a failed apply means for its claim; README.md's table "failure class →
// what you see" documents it.
type applyFailure struct {
	// Reason of the Fulfillment's Applied condition (and of the RunFailed event): the class's
	// name, so the reason says what broke without reading the run log.
	Reason string
	// Retry: another apply after a backoff, while attempts remain (the condition stays
	// Unknown meanwhile); afterwards, or without Retry, the claim is replaced.
	Retry bool
	// MarkUnavailable: the offering (type, zone, capacity type) is marked unavailable for a
	// while, so Karpenter plans the pods onto another one instead of the same failing one.
	MarkUnavailable bool
}

// decideApplyFailure maps a failure class to what happens. Capacity and quota mark the
// offering unavailable; so do terminal failures (invalid module or inputs, bad credentials):
// the same inputs would fail again, and replacing claims in a hot loop helps nobody.
// Transient errors, a held lock, a deadline and unclassified failures are retried. A
// cancelled run is not: whoever cancelled it meant it.
func decideApplyFailure(class tfrunner.ErrorClass) applyFailure {
	if class == "" {
		class = tfrunner.Unknown
	}
	return applyFailure{
		Reason:          string(class),
		Retry:           class.Retryable() || class == tfrunner.Unknown,
		MarkUnavailable: class.InsufficientCapacity() || class.Terminal(),
	}
}
