// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"testing"

	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

func TestPhase(t *testing.T) {
	now := metav1.Now()
	mk := func(deleting bool, runs int, set func(status.ConditionSet)) *v1alpha1.Fulfillment {
		f := &v1alpha1.Fulfillment{}
		if deleting {
			f.DeletionTimestamp = &now
		}
		for range runs {
			f.Status.Runs = append(f.Status.Runs, v1alpha1.Run{Name: "r", Operation: "apply"})
		}
		set(f.StatusConditions())
		return f
	}
	for _, tc := range []struct {
		name, want, reason string
		f                  *v1alpha1.Fulfillment
	}{
		{"new", v1alpha1.PhasePending, "", mk(false, 0, func(c status.ConditionSet) {})},
		{"applying", v1alpha1.PhaseApplying, "Applying", mk(false, 1, func(c status.ConditionSet) {
			c.SetUnknownWithReason(v1alpha1.ConditionApplied, "Applying", "running")
		})},
		{"apply failed", v1alpha1.PhaseFailed, "InsufficientCapacity", mk(false, 1, func(c status.ConditionSet) {
			c.SetFalse(v1alpha1.ConditionApplied, "InsufficientCapacity", "sold out")
		})},
		{"joining", v1alpha1.PhaseJoining, "AwaitingNode", mk(false, 1, func(c status.ConditionSet) {
			c.SetTrue(v1alpha1.ConditionApplied)
			c.SetUnknownWithReason(v1alpha1.ConditionJoined, "AwaitingNode", "waiting")
		})},
		{"join timeout", v1alpha1.PhaseFailed, "JoinTimeout", mk(false, 1, func(c status.ConditionSet) {
			c.SetTrue(v1alpha1.ConditionApplied)
			c.SetFalse(v1alpha1.ConditionJoined, "JoinTimeout", "never joined")
		})},
		{"gating", v1alpha1.PhaseGating, "AwaitingGpu", mk(false, 1, func(c status.ConditionSet) {
			c.SetTrue(v1alpha1.ConditionApplied)
			c.SetTrue(v1alpha1.ConditionJoined)
			c.SetTrue(v1alpha1.ConditionCNIReady)
			c.SetUnknownWithReason(v1alpha1.ConditionGPUReady, "AwaitingGpu", "nvidia.com/gpu allocatable 0 of 1")
		})},
		{"gate missed its deadline", v1alpha1.PhaseDegraded, v1alpha1.ReasonGPUNotRegistered, mk(false, 1, func(c status.ConditionSet) {
			c.SetTrue(v1alpha1.ConditionApplied)
			c.SetTrue(v1alpha1.ConditionJoined)
			c.SetTrue(v1alpha1.ConditionCNIReady)
			c.SetFalse(v1alpha1.ConditionGPUReady, v1alpha1.ReasonGPUNotRegistered, "nvidia.com/gpu allocatable 0 of 1 after 10m")
		})},
		{"ready", v1alpha1.PhaseReady, "", mk(false, 1, func(c status.ConditionSet) {
			for _, t := range []string{v1alpha1.ConditionApplied, v1alpha1.ConditionJoined, v1alpha1.ConditionCNIReady,
				v1alpha1.ConditionGPUReady, v1alpha1.ConditionGatesReady, v1alpha1.ConditionInitialized} {
				c.SetTrue(t)
			}
		})},
		{"ready, kept by the billing-aware scale-down", v1alpha1.PhaseReady, v1alpha1.ReasonHeldForPaidPeriod, mk(false, 1, func(c status.ConditionSet) {
			for _, t := range []string{v1alpha1.ConditionApplied, v1alpha1.ConditionJoined, v1alpha1.ConditionCNIReady,
				v1alpha1.ConditionGPUReady, v1alpha1.ConditionGatesReady, v1alpha1.ConditionInitialized} {
				c.SetTrue(t)
			}
			c.SetTrueWithReason(v1alpha1.ConditionScaleDownHeld, v1alpha1.ReasonHeldForPaidPeriod, "empty, but paid until 2026-12-03T16:00:00Z: kept until 2026-12-03T15:55:00Z")
		})},
		{"ready, not kept", v1alpha1.PhaseReady, status.ConditionReady, mk(false, 1, func(c status.ConditionSet) {
			for _, t := range []string{v1alpha1.ConditionApplied, v1alpha1.ConditionJoined, v1alpha1.ConditionCNIReady,
				v1alpha1.ConditionGPUReady, v1alpha1.ConditionGatesReady, v1alpha1.ConditionInitialized} {
				c.SetTrue(t)
			}
			c.SetFalse(v1alpha1.ConditionScaleDownHeld, v1alpha1.ReasonNotEmpty, "pods run on the node")
		})},
		{"destroying", v1alpha1.PhaseDestroying, "Destroying", mk(true, 1, func(c status.ConditionSet) {
			c.SetUnknownWithReason(v1alpha1.ConditionDestroyed, "Destroying", "running")
		})},
	} {
		got, reason, _ := phase(tc.f)
		if got != tc.want || (tc.reason != "" && reason != tc.reason) {
			t.Errorf("%s: phase %s/%s, want %s/%s", tc.name, got, reason, tc.want, tc.reason)
		}
	}
}
