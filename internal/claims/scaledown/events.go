// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package scaledown

import (
	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
)

// changeEvents are the events of a written status, on the Fulfillment and its NodeClaim: one
// when a hold starts (ScaleDownHeld turned True) and one when it ends (turned False from
// True), with the condition's reason and message. Nothing else changes an event.
func changeEvents(before, after *v1alpha1.Fulfillment, claim *karpv1.NodeClaim) []events.Event {
	was, now := held(before), held(after)
	wasHeld := was != nil && was.IsTrue()
	var message string
	switch {
	case now != nil && now.IsTrue() && !wasHeld:
		message = "node kept from consolidation: " + now.Message
	case wasHeld && (now == nil || !now.IsTrue()):
		message = "node let go for consolidation"
		if now != nil {
			message += ": " + now.Message
		}
	default:
		return nil
	}
	reason := v1alpha1.ReasonScaleDownReleased
	if now != nil {
		reason = now.Reason
	}
	out := []events.Event{{InvolvedObject: after, Type: corev1.EventTypeNormal, Reason: reason, Message: message,
		DedupeValues: []string{classconfig.EventKey(after), reason, message}}}
	if claim != nil {
		out = append(out, events.Event{InvolvedObject: claim, Type: corev1.EventTypeNormal, Reason: reason, Message: message,
			DedupeValues: []string{classconfig.EventKey(claim), reason, message}})
	}
	return out
}

// held is a Fulfillment's ScaleDownHeld condition, nil without one.
func held(f *v1alpha1.Fulfillment) *status.Condition {
	return f.StatusConditions().Get(v1alpha1.ConditionScaleDownHeld)
}
