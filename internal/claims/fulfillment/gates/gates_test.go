// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

func TestGatesFor(t *testing.T) {
	gpu := test.GPUType()
	for _, tc := range []struct {
		name   string
		nt     v1alpha1.NodeType
		mutate func(*v1alpha1.ReadinessSpec)
		want   []string
	}{
		{name: "cpu type: cni only", nt: test.TwoTypeClass().Spec.NodeTypes[0], want: []string{v1alpha1.TaintCNI}},
		{name: "gpu type: cni and gpu", nt: gpu, want: []string{v1alpha1.TaintCNI, v1alpha1.TaintGPU}},
		{name: "gpu gate disabled", nt: gpu, mutate: func(r *v1alpha1.ReadinessSpec) { r.GPU.Disabled = true }, want: []string{v1alpha1.TaintCNI}},
		{name: "all off", nt: gpu, mutate: func(r *v1alpha1.ReadinessSpec) { r.GPU.Disabled, r.CNI.Disabled = true, true }},
		{name: "custom gates", nt: test.TwoTypeClass().Spec.NodeTypes[0], mutate: func(r *v1alpha1.ReadinessSpec) {
			r.Custom = []v1alpha1.CustomGate{{Name: "storage", Label: &v1alpha1.LabelMatch{Key: "csi"}}}
		}, want: []string{v1alpha1.TaintCNI, "readiness.k8s.io/fulfiller.sh-gate-storage"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := test.TwoTypeClass()
			if tc.mutate != nil {
				tc.mutate(&nc.Spec.Readiness)
			}
			var got []string
			for _, taint := range Taints(nc, &tc.nt) {
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

func TestGateChecks(t *testing.T) {
	yes, no := true, false
	ds := &v1alpha1.ObjectRef{Namespace: "kube-system", Name: "cilium"}
	gpu := test.GPUType()
	for _, tc := range []struct {
		name   string
		check  func() Observation
		passed bool
		detail string
	}{
		{"cni: ready", func() Observation { return CheckCNI(test.GatedNode(nil), nil, nil) }, true, ""},
		{"cni: not ready", func() Observation {
			return CheckCNI(test.GatedNode(func(n *corev1.Node) {
				n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = corev1.ConditionFalse, "KubeletNotReady"
			}), nil, nil)
		}, false, "node Ready is False (KubeletNotReady)"},
		{"cni: network unavailable", func() Observation {
			return CheckCNI(test.GatedNode(func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated"})
			}), nil, nil)
		}, false, "node NetworkUnavailable is True (NoRouteCreated)"},
		{"cni: daemonset pod not ready", func() Observation { return CheckCNI(test.GatedNode(nil), ds, &no) }, false, "daemonset kube-system/cilium has no Ready pod on the node"},
		{"cni: daemonset pod ready", func() Observation { return CheckCNI(test.GatedNode(nil), ds, &yes) }, true, ""},
		{"gpu: registered", func() Observation { return CheckGPU(test.GatedNode(nil), GPUResources(&gpu), nil) }, true, ""},
		{"gpu: allocatable 0", func() Observation {
			return CheckGPU(test.GatedNode(func(n *corev1.Node) { n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("0") }), GPUResources(&gpu), nil)
		}, false, "nvidia.com/gpu allocatable 0 of 1"},
		{"gpu: not advertised at all", func() Observation {
			return CheckGPU(test.GatedNode(func(n *corev1.Node) { delete(n.Status.Allocatable, "nvidia.com/gpu") }), GPUResources(&gpu), nil)
		}, false, "nvidia.com/gpu allocatable 0 of 1"},
		{"gpu: validator label missing", func() Observation {
			return CheckGPU(test.GatedNode(nil), GPUResources(&gpu), &v1alpha1.LabelMatch{Key: "nvidia.com/gpu.present", Value: "true"})
		}, false, "validator label nvidia.com/gpu.present=true missing"},
		{"custom: condition met", func() Observation {
			return CheckCustom(test.GatedNode(func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "StorageReady", Status: corev1.ConditionTrue})
			}), &v1alpha1.CustomGate{Name: "storage", NodeCondition: &v1alpha1.NodeConditionMatch{Type: "StorageReady"}})
		}, true, ""},
		{"custom: condition absent", func() Observation {
			return CheckCustom(test.GatedNode(nil), &v1alpha1.CustomGate{Name: "storage", NodeCondition: &v1alpha1.NodeConditionMatch{Type: "StorageReady", Status: "True"}})
		}, false, "gate storage: node has no StorageReady condition"},
		{"custom: label wrong value", func() Observation {
			return CheckCustom(test.GatedNode(func(n *corev1.Node) { n.Labels["csi"] = "no" }), &v1alpha1.CustomGate{Name: "csi", Label: &v1alpha1.LabelMatch{Key: "csi", Value: "ok"}})
		}, false, "gate csi: label csi=ok missing"},
	} {
		obs := tc.check()
		if obs.Passed != tc.passed || obs.Detail != tc.detail {
			t.Errorf("%s: passed %v %q, want %v %q", tc.name, obs.Passed, obs.Detail, tc.passed, tc.detail)
		}
	}
}

func TestDecideGate(t *testing.T) {
	g := For(test.TwoTypeClass(), new(test.GPUType()))[1]
	if g.Kind != KindGPU || g.Deadline != v1alpha1.DefaultGPUDeadline {
		t.Fatalf("gate %+v", g)
	}
	missing := Observation{Detail: "nvidia.com/gpu allocatable 0 of 1"}
	for _, tc := range []struct {
		name    string
		obs     Observation
		waited  time.Duration
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"passed", Observation{Passed: true}, 42 * time.Second, metav1.ConditionTrue, v1alpha1.ReasonGateOpen, "gpu gate open after 42s"},
		{"waiting", missing, time.Minute, metav1.ConditionUnknown, "AwaitingGpu", "nvidia.com/gpu allocatable 0 of 1"},
		{"deadline passed", missing, 10 * time.Minute, metav1.ConditionFalse, v1alpha1.ReasonGPUNotRegistered, "nvidia.com/gpu allocatable 0 of 1 after 10m"},
		{"validator missing", Observation{Reason: v1alpha1.ReasonGPUNotValidated, Detail: "validator label x missing"}, time.Hour,
			metav1.ConditionFalse, v1alpha1.ReasonGPUNotValidated, "validator label x missing after 10m"},
	} {
		d := Decide(g, tc.obs, tc.waited)
		if d.Status != tc.status || d.Reason != tc.reason || d.Message != tc.message || d.Open != tc.obs.Passed {
			t.Errorf("%s: %+v, want %s/%s %q", tc.name, d, tc.status, tc.reason, tc.message)
		}
		if d.Status == metav1.ConditionUnknown && (d.Requeue <= 0 || d.Requeue > 5*time.Second) {
			t.Errorf("%s: requeue %s", tc.name, d.Requeue)
		}
	}
	open := Decision{Status: metav1.ConditionTrue, Open: true, Message: "a"}
	wait := Decision{Status: metav1.ConditionUnknown, Reason: "AwaitingCustom"}
	late := Decision{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCustomGateNotMet}
	if d := RollUp([]Decision{open, wait, late}); d.Status != metav1.ConditionFalse {
		t.Errorf("RollUp with a late gate: %+v", d)
	}
	if d := RollUp([]Decision{open, wait}); d.Status != metav1.ConditionUnknown {
		t.Errorf("RollUp with a waiting gate: %+v", d)
	}
	if d := RollUp([]Decision{open, open}); d.Status != metav1.ConditionTrue || !d.Open {
		t.Errorf("RollUp of open gates: %+v", d)
	}
}

func TestStaleGateTaints(t *testing.T) {
	n := test.GatedNode(func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "readiness.k8s.io/fulfiller.sh-gate-gone"}, corev1.Taint{Key: "readiness.k8s.io/other-controller"})
	})
	got := StaleTaints(n, For(test.TwoTypeClass(), new(test.GPUType())))
	if strings.Join(got, ",") != "readiness.k8s.io/fulfiller.sh-gate-gone" {
		t.Errorf("stale taints %v: only our undeclared gate's taint may go", got)
	}
}
