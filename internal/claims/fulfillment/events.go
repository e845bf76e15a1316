// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
)

// The Fulfillment's events, published after its status is written (Controller.finish), only
// when a condition changes.

func applyStartedEvent(obj runtime.Object, run string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonApplyStarted,
		Message: "tofu apply started: " + run, DedupeValues: []string{run}}
}

func appliedEvent(obj runtime.Object, providerID string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonApplied,
		Message: "machine created: " + providerID, DedupeValues: []string{providerID}}
}

func joinedEvent(obj runtime.Object, node string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonJoined,
		Message: "node " + node + " registered; bootstrap token revoked", DedupeValues: []string{node}}
}

// joinFailedEvent: no node will join (JoinTimeout, the family's reason at the timeout, or
// MachineDeleted).
func joinFailedEvent(obj runtime.Object, reason, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: reason, Message: message}
}

func gateOpenedEvent(obj runtime.Object, cond, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: cond,
		Message: message, DedupeValues: []string{classconfig.EventKey(obj), cond}}
}

// gateTimeoutEvent goes to the Fulfillment and the NodeClaim once, when a gate misses its
// deadline.
func gateTimeoutEvent(obj runtime.Object, reason, message string, policy v1alpha1.GatePolicy) events.Event {
	action := "keeping the node (policy ReportOnly)"
	if policy == v1alpha1.GatePolicyReplace {
		action = "replacing the claim (policy Replace)"
	}
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: reason,
		Message: message + "; " + action, DedupeValues: []string{classconfig.EventKey(obj), reason}}
}

func userDataFailedEvent(obj runtime.Object, reason, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: reason,
		Message: message + "; no machine created", DedupeValues: []string{classconfig.EventKey(obj), reason}}
}

func applyOverdueEvent(obj runtime.Object, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonApplyOverdue,
		Message: message, DedupeValues: []string{classconfig.EventKey(obj)}}
}

func destroyedEvent(obj runtime.Object) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonDestroyed,
		Message: "machine destroyed and state removed"}
}
