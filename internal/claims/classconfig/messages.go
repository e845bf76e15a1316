// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"fmt"

	"github.com/awslabs/operatorpkg/status"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// Every room builds its events in its own events.go and publishes them when a condition
// changes, never per reconcile; the recorder also de-duplicates. Their messages, like the
// conditions', are bounded by v1alpha1.ShortMessage when they are written.

// ShortenConditions bounds the conditions' messages (v1alpha1.ShortMessage).
func ShortenConditions(conds []status.Condition) {
	for i := range conds {
		conds[i].Message = v1alpha1.ShortMessage(conds[i].Message)
	}
}

// ShortenEvents bounds the events' messages (v1alpha1.ShortMessage).
func ShortenEvents(evts []events.Event) []events.Event {
	for i := range evts {
		evts[i].Message = v1alpha1.ShortMessage(evts[i].Message)
	}
	return evts
}

// EventKey names an event's object for de-duplication: the recorder's key is only the
// reason and the dedupe values, so without it events of different objects would collapse.
func EventKey(obj runtime.Object) string {
	name := ""
	if m, err := meta.Accessor(obj); err == nil {
		name = m.GetName()
	}
	return fmt.Sprintf("%T/%s", obj, name)
}
