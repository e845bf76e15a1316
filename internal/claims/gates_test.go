// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

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
)

func gpuType() v1alpha1.NodeType {
	nt := testClass().Spec.NodeTypes[0]
	nt.Name = "gpu"
	nt.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		"nvidia.com/gpu": resource.MustParse("1")}
	return nt
}

func TestGatesFor(t *testing.T) {
	gpu := gpuType()
	for _, tc := range []struct {
		name   string
		nt     v1alpha1.NodeType
		mutate func(*v1alpha1.ReadinessSpec)
		want   []string
	}{
		{name: "cpu type: cni only", nt: testClass().Spec.NodeTypes[0], want: []string{v1alpha1.TaintCNI}},
		{name: "gpu type: cni and gpu", nt: gpu, want: []string{v1alpha1.TaintCNI, v1alpha1.TaintGPU}},
		{name: "gpu gate disabled", nt: gpu, mutate: func(r *v1alpha1.ReadinessSpec) { r.GPU.Disabled = true }, want: []string{v1alpha1.TaintCNI}},
		{name: "all off", nt: gpu, mutate: func(r *v1alpha1.ReadinessSpec) { r.GPU.Disabled, r.CNI.Disabled = true, true }},
		{name: "custom gates", nt: testClass().Spec.NodeTypes[0], mutate: func(r *v1alpha1.ReadinessSpec) {
			r.Custom = []v1alpha1.CustomGate{{Name: "storage", Label: &v1alpha1.LabelMatch{Key: "csi"}}}
		}, want: []string{v1alpha1.TaintCNI, "readiness.k8s.io/fulfiller.sh-gate-storage"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := testClass()
			if tc.mutate != nil {
				tc.mutate(&nc.Spec.Readiness)
			}
			var got []string
			for _, taint := range GateTaints(nc, &tc.nt) {
				if taint.Effect != corev1.TaintEffectNoSchedule || !strings.HasPrefix(taint.Key, "readiness.k8s.io/") {
					t.Errorf("taint %s is not a readiness.k8s.io/ NoSchedule taint", taint.ToString())
				}
				got = append(got, taint.Key)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("taints %v, want %v", got, tc.want)
			}
		})
	}
}

func node(mutate func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Labels: map[string]string{}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: v1alpha1.TaintCNI, Effect: corev1.TaintEffectNoSchedule},
			{Key: v1alpha1.TaintGPU, Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/dedicated", Effect: corev1.TaintEffectNoSchedule},
		}},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		},
	}
	if mutate != nil {
		mutate(n)
	}
	return n
}

func TestGateChecks(t *testing.T) {
	yes, no := true, false
	ds := &v1alpha1.ObjectRef{Namespace: "kube-system", Name: "cilium"}
	gpu := gpuType()
	for _, tc := range []struct {
		name   string
		check  func() gateObservation
		passed bool
		detail string
	}{
		{"cni: ready", func() gateObservation { return checkCNI(node(nil), nil, nil) }, true, ""},
		{"cni: not ready", func() gateObservation {
			return checkCNI(node(func(n *corev1.Node) {
				n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = corev1.ConditionFalse, "KubeletNotReady"
			}), nil, nil)
		}, false, "node Ready is False (KubeletNotReady)"},
		{"cni: network unavailable", func() gateObservation {
			return checkCNI(node(func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated"})
			}), nil, nil)
		}, false, "node NetworkUnavailable is True (NoRouteCreated)"},
		{"cni: daemonset pod not ready", func() gateObservation { return checkCNI(node(nil), ds, &no) }, false, "daemonset kube-system/cilium has no Ready pod on the node"},
		{"cni: daemonset pod ready", func() gateObservation { return checkCNI(node(nil), ds, &yes) }, true, ""},
		{"gpu: registered", func() gateObservation { return checkGPU(node(nil), gpuResources(&gpu), nil) }, true, ""},
		{"gpu: allocatable 0", func() gateObservation {
			return checkGPU(node(func(n *corev1.Node) { n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("0") }), gpuResources(&gpu), nil)
		}, false, "nvidia.com/gpu allocatable 0 of 1"},
		{"gpu: not advertised at all", func() gateObservation {
			return checkGPU(node(func(n *corev1.Node) { delete(n.Status.Allocatable, "nvidia.com/gpu") }), gpuResources(&gpu), nil)
		}, false, "nvidia.com/gpu allocatable 0 of 1"},
		{"gpu: validator label missing", func() gateObservation {
			return checkGPU(node(nil), gpuResources(&gpu), &v1alpha1.LabelMatch{Key: "nvidia.com/gpu.present", Value: "true"})
		}, false, "validator label nvidia.com/gpu.present=true missing"},
		{"custom: condition met", func() gateObservation {
			return checkCustom(node(func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "StorageReady", Status: corev1.ConditionTrue})
			}), &v1alpha1.CustomGate{Name: "storage", NodeCondition: &v1alpha1.NodeConditionMatch{Type: "StorageReady"}})
		}, true, ""},
		{"custom: condition absent", func() gateObservation {
			return checkCustom(node(nil), &v1alpha1.CustomGate{Name: "storage", NodeCondition: &v1alpha1.NodeConditionMatch{Type: "StorageReady", Status: "True"}})
		}, false, "gate storage: node has no StorageReady condition"},
		{"custom: label wrong value", func() gateObservation {
			return checkCustom(node(func(n *corev1.Node) { n.Labels["csi"] = "no" }), &v1alpha1.CustomGate{Name: "csi", Label: &v1alpha1.LabelMatch{Key: "csi", Value: "ok"}})
		}, false, "gate csi: label csi=ok missing"},
	} {
		obs := tc.check()
		if obs.passed != tc.passed || obs.detail != tc.detail {
			t.Errorf("%s: passed %v %q, want %v %q", tc.name, obs.passed, obs.detail, tc.passed, tc.detail)
		}
	}
}

func TestDecideGate(t *testing.T) {
	g := gatesFor(testClass(), new(gpuType()))[1]
	if g.kind != gateGPU || g.deadline != v1alpha1.DefaultGPUDeadline {
		t.Fatalf("gate %+v", g)
	}
	missing := gateObservation{detail: "nvidia.com/gpu allocatable 0 of 1"}
	for _, tc := range []struct {
		name    string
		obs     gateObservation
		waited  time.Duration
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"passed", gateObservation{passed: true}, 42 * time.Second, metav1.ConditionTrue, v1alpha1.ReasonGateOpen, "gpu gate open after 42s"},
		{"waiting", missing, time.Minute, metav1.ConditionUnknown, "AwaitingGpu", "nvidia.com/gpu allocatable 0 of 1"},
		{"deadline passed", missing, 10 * time.Minute, metav1.ConditionFalse, v1alpha1.ReasonGPUNotRegistered, "nvidia.com/gpu allocatable 0 of 1 after 10m"},
		{"validator missing", gateObservation{reason: v1alpha1.ReasonGPUNotValidated, detail: "validator label x missing"}, time.Hour,
			metav1.ConditionFalse, v1alpha1.ReasonGPUNotValidated, "validator label x missing after 10m"},
	} {
		d := decideGate(g, tc.obs, tc.waited)
		if d.status != tc.status || d.reason != tc.reason || d.message != tc.message || d.open != tc.obs.passed {
			t.Errorf("%s: %+v, want %s/%s %q", tc.name, d, tc.status, tc.reason, tc.message)
		}
		if d.status == metav1.ConditionUnknown && (d.requeue <= 0 || d.requeue > 5*time.Second) {
			t.Errorf("%s: requeue %s", tc.name, d.requeue)
		}
	}
	open := gateDecision{status: metav1.ConditionTrue, open: true, message: "a"}
	wait := gateDecision{status: metav1.ConditionUnknown, reason: "AwaitingCustom"}
	late := gateDecision{status: metav1.ConditionFalse, reason: v1alpha1.ReasonCustomGateNotMet}
	if d := rollUp([]gateDecision{open, wait, late}); d.status != metav1.ConditionFalse {
		t.Errorf("rollUp with a late gate: %+v", d)
	}
	if d := rollUp([]gateDecision{open, wait}); d.status != metav1.ConditionUnknown {
		t.Errorf("rollUp with a waiting gate: %+v", d)
	}
	if d := rollUp([]gateDecision{open, open}); d.status != metav1.ConditionTrue || !d.open {
		t.Errorf("rollUp of open gates: %+v", d)
	}
}

func TestStaleGateTaints(t *testing.T) {
	n := node(func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "readiness.k8s.io/fulfiller.sh-gate-gone"}, corev1.Taint{Key: "readiness.k8s.io/other-controller"})
	})
	got := staleGateTaints(n, gatesFor(testClass(), new(gpuType())))
	if strings.Join(got, ",") != "readiness.k8s.io/fulfiller.sh-gate-gone" {
		t.Errorf("stale taints %v: only our undeclared gate's taint may go", got)
	}
}

func TestRegistrationFit(t *testing.T) {
	d := func(m time.Duration) *metav1.Duration { return &metav1.Duration{Duration: m} }
	for _, tc := range []struct {
		name        string
		apply, join *metav1.Duration
		fits        bool
		why         string
	}{
		{name: "defaults", fits: true},
		{name: "exactly the window", apply: d(5 * time.Minute), join: d(10 * time.Minute), fits: true},
		{name: "slow bare metal", apply: d(12 * time.Minute), join: d(10 * time.Minute), why: "t (apply 12m + join 10m = 22m)"},
		{name: "long join, default apply", join: d(12 * time.Minute), why: "t (apply 4m + join 12m = 16m)"},
	} {
		nt := &v1alpha1.NodeType{Name: "t", JoinTimeout: tc.join, Deadlines: v1alpha1.StageDeadlines{Apply: tc.apply}}
		fits, why := registrationFit(nt)
		if fits != tc.fits || why != tc.why {
			t.Errorf("%s: fits %v %q, want %v %q", tc.name, fits, why, tc.fits, tc.why)
		}
	}
	nc := testClass()
	nc.Spec.NodeTypes[1].Deadlines.Apply = d(14 * time.Minute)
	its, err := instanceTypes(nc, NewUnavailableOfferings(clocktesting.NewFakeClock(time.Now()), time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(its[1].Offerings.Available()) != 0 || len(its[0].Offerings.Available()) == 0 {
		t.Error("a type that cannot register in the window must be listed but not launchable, the others launchable")
	}
}

func TestKubeletArgs(t *testing.T) {
	nc := testClass()
	nc.Spec.Bootstrap.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "max-pods", Value: "50"}, {Name: "v", Value: "2"}}
	nt := nc.Spec.NodeTypes[0]
	nt.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "max-pods", Value: "200"}, {Name: "cpu-manager-policy", Value: "static"}}
	var got []string
	for _, a := range kubeletArgs(nc, &nt) {
		got = append(got, a.Name+"="+a.Value)
	}
	if strings.Join(got, " ") != "max-pods=200 v=2 cpu-manager-policy=static" {
		t.Errorf("kubelet args %v", got)
	}
	nc.Spec.Bootstrap.KubeletExtraArgs = append(nc.Spec.Bootstrap.KubeletExtraArgs, v1alpha1.KubeletArg{Name: "provider-id", Value: "x"})
	nc.Spec.Bootstrap.ExtraCloudConfig = "#!/bin/sh\n"
	err := validateSpec(&nc.Spec, nil)
	if err == nil || !strings.Contains(err.Error(), "kubelet arg provider-id is set by the fulfiller") || !strings.Contains(err.Error(), "extraCloudConfig") {
		t.Errorf("validateSpec = %v, want the reserved arg and the bad cloud-config named", err)
	}
}

// TestGateStagePolicies runs the gate stage against a Node whose GPU never registers: within
// the deadline the condition waits; past it the condition says precisely why, one event goes
// to the Fulfillment and the NodeClaim, the timeout is counted, and the policy decides whether
// the claim is replaced. A later pass still opens the gate under ReportOnly.
func TestGateStagePolicies(t *testing.T) {
	for _, policy := range []v1alpha1.GatePolicy{v1alpha1.GatePolicyReportOnly, v1alpha1.GatePolicyReplace} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(time.Now())
			nc := testClass()
			nc.Spec.Readiness.Policy = policy
			nc.Spec.NodeTypes = append(nc.Spec.NodeTypes, gpuType())
			nt := &nc.Spec.NodeTypes[2]
			nt.Deadlines.GPU = &metav1.Duration{Duration: 30 * time.Second}
			n := node(func(n *corev1.Node) {
				n.Name = "gpu-" + strings.ToLower(string(policy))
				n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("0")
			})
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(n).WithStatusSubresource(&corev1.Node{}).Build()
			ctrl := &FulfillmentController{kube: kube, clock: clk}
			registered := metav1.NewTime(clk.Now())
			f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: n.Name}, Spec: v1alpha1.FulfillmentSpec{NodeType: "gpu"}}
			f.Status.NodeName, f.Status.Stages.Registered = n.Name, &registered
			s := &claimState{f: f, nc: nc, nt: nt, claim: &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}}
			s.conds = f.StatusConditions(status.WithClock(clk))
			s.conds.SetTrue(v1alpha1.ConditionApplied)
			s.conds.SetTrue(v1alpha1.ConditionJoined)
			stage := &gateStage{ctrl}
			counter := gateTimeouts.WithLabelValues(gateGPU, "gpu", string(policy))
			before := testutil.ToFloat64(counter)
			run := func() {
				t.Helper()
				s.events, s.afterWrite = nil, nil
				if _, err := stage.reconcile(ctx, s); err != nil {
					t.Fatal(err)
				}
				for _, fn := range s.afterWrite {
					fn()
				}
			}

			clk.Step(10 * time.Second)
			run()
			if c := s.conds.Get(v1alpha1.ConditionCNIReady); !c.IsTrue() || s.f.Status.Stages.CNIReady == nil {
				t.Errorf("CNI gate of a Ready node not opened: %+v", c)
			}
			if c := s.conds.Get(v1alpha1.ConditionGPUReady); !c.IsUnknown() || c.Reason != "AwaitingGpu" {
				t.Errorf("GPUReady within the deadline = %+v", c)
			}
			if c := s.conds.Get(v1alpha1.ConditionGatesReady); !c.IsTrue() || c.Reason != v1alpha1.ReasonGateNotApplicable {
				t.Errorf("GatesReady without custom gates = %+v", c)
			}
			assertTaints(t, kube, n.Name, v1alpha1.TaintGPU, "example.com/dedicated")

			clk.Step(25 * time.Second)
			run()
			c := s.conds.Get(v1alpha1.ConditionGPUReady)
			if !c.IsFalse() || c.Reason != v1alpha1.ReasonGPUNotRegistered || c.Message != "nvidia.com/gpu allocatable 0 of 1 after 30s" {
				t.Errorf("GPUReady after the deadline = %+v", c)
			}
			if len(s.events) != 2 || s.events[0].Reason != v1alpha1.ReasonGPUNotRegistered || s.events[1].InvolvedObject != s.claim {
				t.Errorf("events %+v, want one on the fulfillment and one on the nodeclaim", s.events)
			}
			if got := testutil.ToFloat64(counter) - before; got != 1 {
				t.Errorf("timeouts counted %v, want 1", got)
			}
			if s.replaceClaim != (policy == v1alpha1.GatePolicyReplace) {
				t.Errorf("replaceClaim = %v under policy %s", s.replaceClaim, policy)
			}
			assertTaints(t, kube, n.Name, v1alpha1.TaintGPU, "example.com/dedicated")

			clk.Step(30 * time.Second)
			run()
			if len(s.events) != 0 || testutil.ToFloat64(counter)-before != 1 {
				t.Errorf("a gate still late is reported again: events %+v", s.events)
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
			run()
			if c := s.conds.Get(v1alpha1.ConditionGPUReady); !c.IsTrue() || s.f.Status.Stages.GPUReady == nil {
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
	nc := testClass()
	nt := &nc.Spec.NodeTypes[0]
	nt.Deadlines.Apply = &metav1.Duration{Duration: time.Minute}
	started := metav1.NewTime(clk.Now())
	f := &v1alpha1.Fulfillment{}
	f.Status.Stages.ApplyStarted = &started
	s := &claimState{f: f, nc: nc, nt: nt}
	s.conds = f.StatusConditions(status.WithClock(clk))
	a := &FulfillmentController{clock: clk}
	run := &v1alpha1.Run{Name: "c-apply-1"}
	clk.Step(30 * time.Second)
	a.reportOverdue(s, run)
	if c := s.conds.Get(v1alpha1.ConditionApplied); c.Reason == v1alpha1.ReasonApplyOverdue || len(s.events) != 0 {
		t.Fatalf("reported overdue within the deadline: %+v", c)
	}
	for range 2 {
		clk.Step(40 * time.Second)
		a.reportOverdue(s, run)
	}
	c := s.conds.Get(v1alpha1.ConditionApplied)
	if !c.IsUnknown() || c.Reason != v1alpha1.ReasonApplyOverdue || c.Message != "c-apply-1: still running after the node type's apply deadline of 1m" {
		t.Errorf("Applied = %+v", c)
	}
	if len(s.events) != 1 {
		t.Errorf("%d events, want one", len(s.events))
	}
}
