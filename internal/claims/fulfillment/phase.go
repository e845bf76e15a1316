// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"github.com/awslabs/operatorpkg/status"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// phase derives the display phase and the one-line reason and message that explain it, from
// the first condition that is not settled.
func phase(f *v1alpha1.Fulfillment) (string, string, string) {
	conds := f.StatusConditions()
	explain := func(p, t string) (string, string, string) {
		if c := conds.Get(t); c != nil {
			return p, c.Reason, c.Message
		}
		return p, "", ""
	}
	if !f.DeletionTimestamp.IsZero() {
		if conds.IsTrue(v1alpha1.ConditionDestroyed) {
			return explain(v1alpha1.PhaseDestroyed, v1alpha1.ConditionDestroyed)
		}
		return explain(v1alpha1.PhaseDestroying, v1alpha1.ConditionDestroyed)
	}
	steps := []struct{ cond, phase string }{
		{v1alpha1.ConditionApplied, v1alpha1.PhaseApplying},
		{v1alpha1.ConditionJoined, v1alpha1.PhaseJoining},
		{v1alpha1.ConditionCNIReady, v1alpha1.PhaseGating},
		{v1alpha1.ConditionGPUReady, v1alpha1.PhaseGating},
		{v1alpha1.ConditionGatesReady, v1alpha1.PhaseGating},
		{v1alpha1.ConditionInitialized, v1alpha1.PhaseInitializing},
	}
	for _, st := range steps {
		c := conds.Get(st.cond)
		switch {
		case c == nil:
			return v1alpha1.PhasePending, "", ""
		case c.IsFalse() && st.phase == v1alpha1.PhaseGating:
			// A gate that missed its deadline: the node is kept or replaced by policy.
			return explain(v1alpha1.PhaseDegraded, st.cond)
		case c.IsFalse():
			return explain(v1alpha1.PhaseFailed, st.cond)
		case !c.IsTrue():
			if st.cond == v1alpha1.ConditionApplied && len(f.Status.Runs) == 0 {
				return explain(v1alpha1.PhasePending, st.cond)
			}
			return explain(st.phase, st.cond)
		}
	}
	if conds.IsTrue(v1alpha1.ConditionScaleDownHeld) {
		// Empty, and kept until its paid period ends (the billing-aware scale-down).
		return explain(v1alpha1.PhaseReady, v1alpha1.ConditionScaleDownHeld)
	}
	return explain(v1alpha1.PhaseReady, status.ConditionReady)
}
