// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
)

// The repair policies are what Karpenter's NodeRepair feature gate compiles at startup (the
// controller exits when they are refused), and they replace a node whose kubelet stopped
// reporting for 30 minutes, whatever the condition's reason.
func TestRepairPoliciesAcceptedByKarpenter(t *testing.T) {
	ctx := coreoptions.ToContext(context.Background(), &coreoptions.Options{FeatureGates: coreoptions.FeatureGates{NodeRepair: true}})
	p := New(Options{Clock: clocktesting.NewFakeClock(time.Now())})
	matcher, err := health.NewRepairPolicyMatcher(ctx, p)
	if err != nil {
		t.Fatalf("karpenter refuses the repair policies: %v", err)
	}
	if matcher == nil {
		t.Fatal("no matcher although NodeRepair is on")
	}
	created := time.Now().Add(-2 * time.Hour)
	for _, tc := range []struct {
		status corev1.ConditionStatus
		reason string
		since  time.Duration
		repair bool
	}{
		{corev1.ConditionFalse, "KubeletNotReady", 31 * time.Minute, true},
		{corev1.ConditionUnknown, "NodeStatusUnknown", 31 * time.Minute, true},
		{corev1.ConditionUnknown, "", 31 * time.Minute, true},
		{corev1.ConditionFalse, "KubeletNotReady", 29 * time.Minute, false},
		{corev1.ConditionTrue, "KubeletReady", 5 * time.Hour, false},
	} {
		now := time.Now()
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", CreationTimestamp: metav1.NewTime(created)},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: tc.status, Reason: tc.reason, LastTransitionTime: metav1.NewTime(now.Add(-tc.since)),
			}}},
		}
		res := health.Resolve(matcher.Match(node), now, created)
		if got := res.Action == cloudprovider.ReplaceNode; got != tc.repair {
			t.Errorf("Ready=%s (%q) for %s: action %q, want repair=%v", tc.status, tc.reason, tc.since, res.Action, tc.repair)
		}
	}
}

// The operator's toleration (--repair-toleration) is the policies' toleration, for both
// statuses.
func TestRepairToleration(t *testing.T) {
	p := New(Options{Clock: clocktesting.NewFakeClock(time.Now()), RepairToleration: 2 * time.Minute})
	for _, policy := range p.RepairPolicies() {
		if policy.TolerationDuration != 2*time.Minute {
			t.Errorf("policy %s=%s tolerates %s, want 2m", policy.ConditionType, policy.ConditionStatus, policy.TolerationDuration)
		}
	}
	for _, policy := range New(Options{Clock: clocktesting.NewFakeClock(time.Now())}).RepairPolicies() {
		if policy.TolerationDuration != DefaultRepairToleration {
			t.Errorf("without a setting, policy %s=%s tolerates %s, want %s", policy.ConditionType, policy.ConditionStatus, policy.TolerationDuration, DefaultRepairToleration)
		}
	}
}
