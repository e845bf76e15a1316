// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package scaledown

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/billing"
)

// facts are what the decision reads of one claim, gathered by the reconcile.
type facts struct {
	policy billing.Policy
	// launched is when the claim's machine was made (its billing started).
	launched time.Time
	// consolidatable: the NodeClaim's Consolidatable condition is True.
	consolidatable bool
	// pods is how many of the Node's pods Karpenter would reschedule (not daemons, mirror
	// or finished pods): the node is empty without them.
	pods int
	// drifted, expired and unhealthy as Karpenter sees the claim and its Node.
	drifted, expired, unhealthy bool
	// othersAnnotation: the Node carries a karpenter.sh/do-not-disrupt annotation that is not
	// the fulfiller's.
	othersAnnotation bool
}

// outcome is what the reconcile makes of the claim: whether its Node is held, until when,
// and its ScaleDownHeld condition.
type outcome struct {
	hold  bool
	until time.Time
	// requeue is when the decision changes by the clock alone (the hold's end; the next
	// paid period's start); zero: only a change of the objects changes it.
	requeue time.Time
	status  metav1.ConditionStatus
	reason  string
	message string
}

// decide is the claim's outcome at now (pure): someone else's do-not-disrupt annotation is
// left alone; otherwise the class's policy decides, with the node empty when Karpenter would
// consolidate it (Consolidatable) and it runs no pod but daemons.
func decide(in facts, now time.Time) outcome {
	if in.othersAnnotation {
		return outcome{status: metav1.ConditionFalse, reason: v1alpha1.ReasonDoNotDisruptSet,
			message: "the Node has a karpenter.sh/do-not-disrupt annotation the fulfiller did not set: left as it is"}
	}
	d := in.policy.Decide(billing.Node{Launched: in.launched, Empty: in.consolidatable && in.pods == 0,
		Drifted: in.drifted, Expired: in.expired, Unhealthy: in.unhealthy}, now)
	out := outcome{hold: d.Hold, until: d.Until, status: metav1.ConditionFalse, message: d.Reason}
	switch d.Cause {
	case billing.Held:
		out.status, out.reason, out.requeue = metav1.ConditionTrue, v1alpha1.ReasonHeldForPaidPeriod, d.Until
	case billing.PeriodEnding:
		// Let go; should Karpenter not have deleted it when the next period starts, that one is
		// paid too and the node is held again.
		out.reason, out.requeue = v1alpha1.ReasonPaidPeriodEnding, d.PaidUntil
	case billing.Drifted:
		out.reason = v1alpha1.ReasonNodeDrifted
	case billing.Expired:
		out.reason = v1alpha1.ReasonNodeExpired
	case billing.Unhealthy:
		out.reason = v1alpha1.ReasonNodeUnhealthy
	case billing.NotEmpty:
		if in.pods > 0 {
			out.reason, out.message = v1alpha1.ReasonNotEmpty, "pods run on the node"
		} else {
			out.reason, out.message = v1alpha1.ReasonNotConsolidatable, "Karpenter does not consolidate the node now (its NodeClaim is not Consolidatable)"
		}
	default: // no period: the class's policy is resolved before deciding, so not reached
		out.reason = v1alpha1.ReasonNotConsolidatable
	}
	return out
}
