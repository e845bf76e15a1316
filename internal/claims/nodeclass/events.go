// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
)

// The class's events, published after its status is written, only when its Ready condition
// changes or it starts to wait for its claims.

func nodeClassEvent(obj runtime.Object, ready bool, reason, message string) events.Event {
	typ := corev1.EventTypeNormal
	if !ready {
		typ = corev1.EventTypeWarning
	}
	return events.Event{InvolvedObject: obj, Type: typ, Reason: reason, Message: message, DedupeValues: []string{classconfig.EventKey(obj), reason, message}}
}

func nodeClassTerminatingEvent(obj runtime.Object, message string) events.Event {
	return events.Event{InvolvedObject: obj, Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonClaimsRemaining, Message: message,
		DedupeValues: []string{classconfig.EventKey(obj)}}
}
