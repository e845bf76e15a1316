// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"fmt"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// Events are built here only, and published when a condition changes, never per reconcile;
// the recorder also de-duplicates. Their messages, like the conditions', are bounded by
// v1alpha1.ShortMessage when they are written.

// shortenMessages bounds the conditions' messages (v1alpha1.ShortMessage).
func shortenMessages(conds []status.Condition) {
	for i := range conds {
		conds[i].Message = v1alpha1.ShortMessage(conds[i].Message)
	}
}

// shortenEventMessages bounds the events' messages (v1alpha1.ShortMessage).
func shortenEventMessages(evts []events.Event) []events.Event {
	for i := range evts {
		evts[i].Message = v1alpha1.ShortMessage(evts[i].Message)
	}
	return evts
}

func applyStartedEvent(obj runtime.Object, run string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonApplyStarted,
		Message: "tofu apply started: " + run, DedupeValues: []string{run}}
}

func appliedEvent(obj runtime.Object, providerID string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonApplied,
		Message: "machine created: " + providerID, DedupeValues: []string{providerID}}
}

func runFailedEvent(obj runtime.Object, run, class, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: class,
		Message: run + ": " + message, DedupeValues: []string{run}}
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
		Message: message, DedupeValues: []string{objectKey(obj), cond}}
}

// gateTimeoutEvent goes to the Fulfillment and the NodeClaim once, when a gate misses its
// deadline.
func gateTimeoutEvent(obj runtime.Object, reason, message string, policy v1alpha1.GatePolicy) events.Event {
	action := "keeping the node (policy ReportOnly)"
	if policy == v1alpha1.GatePolicyReplace {
		action = "replacing the claim (policy Replace)"
	}
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: reason,
		Message: message + "; " + action, DedupeValues: []string{objectKey(obj), reason}}
}

func userDataFailedEvent(obj runtime.Object, reason, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: reason,
		Message: message + "; no machine created", DedupeValues: []string{objectKey(obj), reason}}
}

// objectKey names an event's object for de-duplication: the recorder's key is only the
// reason and the dedupe values, so without it events of different objects would collapse.
func objectKey(obj runtime.Object) string {
	name := ""
	if m, err := meta.Accessor(obj); err == nil {
		name = m.GetName()
	}
	return fmt.Sprintf("%T/%s", obj, name)
}

func applyOverdueEvent(obj runtime.Object, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonApplyOverdue,
		Message: message, DedupeValues: []string{objectKey(obj)}}
}

func destroyedEvent(obj runtime.Object) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonDestroyed,
		Message: "machine destroyed and state removed"}
}

func nodeClassEvent(obj runtime.Object, ready bool, reason, message string) events.Event {
	typ := corev1.EventTypeNormal
	if !ready {
		typ = corev1.EventTypeWarning
	}
	return events.Event{InvolvedObject: obj, Type: typ, Reason: reason, Message: message, DedupeValues: []string{objectKey(obj), reason, message}}
}

func staleLockRecoveredEvent(obj runtime.Object, lockID, detail string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonStaleLockRecovered,
		Message: "released state lock " + lockID + ": " + detail, DedupeValues: []string{lockID}}
}

func nodeClassTerminatingEvent(obj runtime.Object, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonClaimsRemaining, Message: message,
		DedupeValues: []string{objectKey(obj)}}
}
