package claims

import (
	"github.com/awslabs/operatorpkg/status"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// Phases are display values only; logic reads conditions.
const (
	PhasePending      = "Pending"
	PhaseApplying     = "Applying"
	PhaseJoining      = "Joining"
	PhaseGating       = "Gating"
	PhaseDegraded     = "Degraded"
	PhaseInitializing = "Initializing"
	PhaseReady        = "Ready"
	PhaseFailed       = "Failed"
	PhaseDestroying   = "Destroying"
	PhaseDestroyed    = "Destroyed"
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
			return explain(PhaseDestroyed, v1alpha1.ConditionDestroyed)
		}
		return explain(PhaseDestroying, v1alpha1.ConditionDestroyed)
	}
	steps := []struct{ cond, phase string }{
		{v1alpha1.ConditionApplied, PhaseApplying},
		{v1alpha1.ConditionJoined, PhaseJoining},
		{v1alpha1.ConditionCNIReady, PhaseGating},
		{v1alpha1.ConditionGPUReady, PhaseGating},
		{v1alpha1.ConditionGatesReady, PhaseGating},
		{v1alpha1.ConditionInitialized, PhaseInitializing},
	}
	for _, st := range steps {
		c := conds.Get(st.cond)
		switch {
		case c == nil:
			return PhasePending, "", ""
		case c.IsFalse() && st.phase == PhaseGating:
			// A gate that missed its deadline: the node is kept or replaced by policy.
			return explain(PhaseDegraded, st.cond)
		case c.IsFalse():
			return explain(PhaseFailed, st.cond)
		case !c.IsTrue():
			if st.cond == v1alpha1.ConditionApplied && len(f.Status.Runs) == 0 {
				return explain(PhasePending, st.cond)
			}
			return explain(st.phase, st.cond)
		}
	}
	return explain(PhaseReady, status.ConditionReady)
}
