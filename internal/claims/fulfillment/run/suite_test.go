// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// marked records the offerings marked unavailable.
type marked map[string]bool

func (m marked) MarkUnavailable(nodeType, zone, capacityType string) {
	m[nodeType+"/"+zone+"/"+capacityType] = true
}

func (m marked) IsUnavailable(nodeType, zone, capacityType string) bool {
	return m[nodeType+"/"+zone+"/"+capacityType]
}

// applyDriver and destroyDriver are driven as the Fulfillment controller's apply and destroy
// stages drive theirs.
func applyDriver(r *Runs) *Driver {
	return &Driver{Runs: r, Op: tfrunner.Apply, Condition: v1alpha1.ConditionApplied, Running: v1alpha1.ReasonApplying,
		MaxAttempts: 3, Decide: DecideApplyFailure}
}

func destroyDriver(r *Runs) *Driver {
	return &Driver{Runs: r, Op: tfrunner.Destroy, Condition: v1alpha1.ConditionDestroyed, Running: v1alpha1.ReasonDestroying,
		Decide: DecideDestroyFailure}
}
