package claims

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/karpenter/pkg/events"
)

// Events are built here only, and published when a condition changes, never per reconcile;
// the recorder also de-duplicates.

func applyStartedEvent(obj runtime.Object, run string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: "ApplyStarted",
		Message: "tofu apply started: " + run, DedupeValues: []string{run}}
}

func appliedEvent(obj runtime.Object, providerID string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: "Applied",
		Message: "machine created: " + providerID, DedupeValues: []string{providerID}}
}

func runFailedEvent(obj runtime.Object, run, class, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: class,
		Message: run + ": " + message, DedupeValues: []string{run}}
}

func joinedEvent(obj runtime.Object, node string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: "Joined",
		Message: "node " + node + " registered; bootstrap token revoked", DedupeValues: []string{node}}
}

func joinTimeoutEvent(obj runtime.Object, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: ReasonJoinTimeout,
		Message: message}
}

func destroyedEvent(obj runtime.Object) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: "Destroyed",
		Message: "machine destroyed and state removed"}
}

func nodeClassEvent(obj runtime.Object, ready bool, reason, message string) events.Event {
	typ := corev1.EventTypeNormal
	if !ready {
		typ = corev1.EventTypeWarning
	}
	return events.Event{InvolvedObject: obj, Type: typ, Reason: reason, Message: message, DedupeValues: []string{reason, message}}
}

func staleLockRecoveredEvent(obj runtime.Object, lockID, detail string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: "StaleLockRecovered",
		Message: "released state lock " + lockID + ": " + detail, DedupeValues: []string{lockID}}
}
