// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/gates"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestGateStagePolicies runs the gate stage against a Node whose GPU never registers: within
// the deadline the condition waits; past it the condition says precisely why, one event goes
// to the Fulfillment and the NodeClaim, the timeout is counted, and the policy decides whether
// the claim is replaced. A later pass still opens the gate under ReportOnly.
func TestGateStagePolicies(t *testing.T) {
	for _, policy := range []v1alpha1.GatePolicy{v1alpha1.GatePolicyReportOnly, v1alpha1.GatePolicyReplace} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(time.Now())
			nc := test.TwoTypeClass()
			nc.Spec.Readiness.Policy = policy
			nc.Spec.NodeTypes = append(nc.Spec.NodeTypes, test.GPUType())
			nt := &nc.Spec.NodeTypes[2]
			nt.Deadlines.GPU = &metav1.Duration{Duration: 30 * time.Second}
			n := test.GatedNode(func(n *corev1.Node) {
				n.Name = "gpu-" + strings.ToLower(string(policy))
				n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("0")
			})
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(n).WithStatusSubresource(&corev1.Node{}).Build()
			registered := metav1.NewTime(clk.Now())
			f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: n.Name}, Spec: v1alpha1.FulfillmentSpec{NodeType: "gpu"}}
			f.Status.NodeName, f.Status.Stages.Registered = n.Name, &registered
			s := &claimState{Claim: run.Claim{F: f, Class: nc, NodeType: nt}, claim: &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}}
			s.Conds = f.StatusConditions(status.WithClock(clk))
			s.Conds.SetTrue(v1alpha1.ConditionApplied)
			s.Conds.SetTrue(v1alpha1.ConditionJoined)
			stage := &gateStage{kube: kube, clock: clk}
			counter := gateTimeouts.With(with(claimLabels(f, nc.Spec.Family), "gate", gates.KindGPU, "policy", string(policy)))
			before := testutil.ToFloat64(counter)
			reconcileGates := func() {
				t.Helper()
				s.Events, s.afterWrite = nil, nil
				if _, err := stage.reconcile(ctx, s); err != nil {
					t.Fatal(err)
				}
				for _, fn := range s.afterWrite {
					fn()
				}
			}

			clk.Step(10 * time.Second)
			reconcileGates()
			if c := s.Conds.Get(v1alpha1.ConditionCNIReady); !c.IsTrue() || s.F.Status.Stages.CNIReady == nil {
				t.Errorf("CNI gate of a Ready node not opened: %+v", c)
			}
			if c := s.Conds.Get(v1alpha1.ConditionGPUReady); !c.IsUnknown() || c.Reason != "AwaitingGpu" {
				t.Errorf("GPUReady within the deadline = %+v", c)
			}
			if c := s.Conds.Get(v1alpha1.ConditionGatesReady); !c.IsTrue() || c.Reason != v1alpha1.ReasonGateNotApplicable {
				t.Errorf("GatesReady without custom gates = %+v", c)
			}
			assertTaints(t, kube, n.Name, v1alpha1.TaintGPU, "example.com/dedicated")

			clk.Step(25 * time.Second)
			reconcileGates()
			c := s.Conds.Get(v1alpha1.ConditionGPUReady)
			if !c.IsFalse() || c.Reason != v1alpha1.ReasonGPUNotRegistered || c.Message != "nvidia.com/gpu allocatable 0 of 1 after 30s" {
				t.Errorf("GPUReady after the deadline = %+v", c)
			}
			if len(s.Events) != 2 || s.Events[0].Reason != v1alpha1.ReasonGPUNotRegistered || s.Events[1].InvolvedObject != s.claim {
				t.Errorf("events %+v, want one on the fulfillment and one on the nodeclaim", s.Events)
			}
			if got := testutil.ToFloat64(counter) - before; got != 1 {
				t.Errorf("timeouts counted %v, want 1", got)
			}
			if s.Replace != (policy == v1alpha1.GatePolicyReplace) {
				t.Errorf("replaceClaim = %v under policy %s", s.Replace, policy)
			}
			assertTaints(t, kube, n.Name, v1alpha1.TaintGPU, "example.com/dedicated")

			clk.Step(30 * time.Second)
			reconcileGates()
			if len(s.Events) != 0 || testutil.ToFloat64(counter)-before != 1 {
				t.Errorf("a gate still late is reported again: events %+v", s.Events)
			}
			if policy == v1alpha1.GatePolicyReplace {
				return
			}
			// The device plugin turns up late: ReportOnly lets the gate open after all.
			live := &corev1.Node{}
			if err := kube.Get(ctx, client.ObjectKey{Name: n.Name}, live); err != nil {
				t.Fatal(err)
			}
			live.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("1")
			if err := kube.Status().Update(ctx, live); err != nil {
				t.Fatal(err)
			}
			reconcileGates()
			if c := s.Conds.Get(v1alpha1.ConditionGPUReady); !c.IsTrue() || s.F.Status.Stages.GPUReady == nil {
				t.Errorf("GPUReady after a late registration = %+v", c)
			}
			assertTaints(t, kube, n.Name, "example.com/dedicated")
		})
	}
}

func assertTaints(t *testing.T, kube client.Client, name string, want ...string) {
	t.Helper()
	n := &corev1.Node{}
	if err := kube.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, taint := range n.Spec.Taints {
		got = append(got, taint.Key)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("node taints %v, want %v", got, want)
	}
}

// TestApplyOverdue: an apply running past its node type's deadline is reported once, not
// stopped.
func TestApplyOverdue(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	nc := test.TwoTypeClass()
	nt := &nc.Spec.NodeTypes[0]
	nt.Deadlines.Apply = &metav1.Duration{Duration: time.Minute}
	started := metav1.NewTime(clk.Now())
	f := &v1alpha1.Fulfillment{}
	f.Status.Stages.ApplyStarted = &started
	s := &claimState{Claim: run.Claim{F: f, Class: nc, NodeType: nt}}
	s.Conds = f.StatusConditions(status.WithClock(clk))
	r := &v1alpha1.Run{Name: "c-apply-1"}
	clk.Step(30 * time.Second)
	reportOverdue(&s.Claim, r, nt.ApplyDeadline(), clk)
	if c := s.Conds.Get(v1alpha1.ConditionApplied); c.Reason == v1alpha1.ReasonApplyOverdue || len(s.Events) != 0 {
		t.Fatalf("reported overdue within the deadline: %+v", c)
	}
	for range 2 {
		clk.Step(40 * time.Second)
		reportOverdue(&s.Claim, r, nt.ApplyDeadline(), clk)
	}
	c := s.Conds.Get(v1alpha1.ConditionApplied)
	if !c.IsUnknown() || c.Reason != v1alpha1.ReasonApplyOverdue || c.Message != "c-apply-1: still running after the node type's apply deadline of 1m" {
		t.Errorf("Applied = %+v", c)
	}
	if len(s.Events) != 1 {
		t.Errorf("%d events, want one", len(s.Events))
	}
}
