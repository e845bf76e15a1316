// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// The runs' events, published with the Fulfillment's other events after its status is
// written.

func runFailedEvent(obj runtime.Object, run, class, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: class,
		Message: run + ": " + message, DedupeValues: []string{run}}
}

func staleLockRecoveredEvent(obj runtime.Object, lockID, detail string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonStaleLockRecovered,
		Message: "released state lock " + lockID + ": " + detail, DedupeValues: []string{lockID}}
}
