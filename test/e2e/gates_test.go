// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
)

const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// gpuNodeType is a simulated type with one GPU whose device plugin behaves as vars say.
func gpuNodeType(name string, vars map[string]string) v1alpha1.NodeType {
	v := map[string]string{"gpu_resource": string(gpuResource), "gpu_count": "1"}
	for k, val := range vars {
		v[k] = val
	}
	nt := nodeType(name, "0.5", v)
	nt.Capacity[gpuResource] = resource.MustParse("1")
	return nt
}

// gpuDeployment runs pods that each need one GPU.
func gpuDeployment(name, pool string) *appsv1.Deployment {
	d := deployment(name, pool, 1, "500m")
	c := &d.Spec.Template.Spec.Containers[0]
	c.Resources.Requests[gpuResource] = resource.MustParse("1")
	c.Resources.Limits = corev1.ResourceList{gpuResource: resource.MustParse("1")}
	return d
}

// podOf returns the only pod of a deployment.
func podOf(t *testing.T, ctx context.Context, app string) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := env.kube.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d pods of %s, want 1", len(pods.Items), app)
	}
	return &pods.Items[0]
}

func podScheduled(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// assertGateOrder checks that the gate opened no later than the pod was scheduled onto the
// node and Karpenter initialized its claim (API times have one-second resolution).
func assertGateOrder(t *testing.T, ctx context.Context, f *v1alpha1.Fulfillment, opened *metav1.Time, app string) {
	t.Helper()
	if opened == nil {
		t.Fatalf("fulfillment %s has no stage time for the gate: %+v", f.Name, f.Status.Stages)
	}
	pod := podOf(t, ctx, app)
	if pod.Spec.NodeName != f.Status.NodeName {
		t.Fatalf("pod on node %q, want %q", pod.Spec.NodeName, f.Status.NodeName)
	}
	if scheduled := podScheduled(pod); scheduled.Before(opened.Time) {
		t.Errorf("pod scheduled at %s, before the gate opened at %s", scheduled, opened.Time)
	}
	claim := &karpv1.NodeClaim{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: f.Name}, claim); err != nil {
		t.Fatal(err)
	}
	init := claim.StatusConditions().Get(karpv1.ConditionTypeInitialized)
	if init == nil || !init.IsTrue() {
		t.Fatalf("nodeclaim %s not Initialized: %+v", f.Name, init)
	}
	if init.LastTransitionTime.Before(opened) {
		t.Errorf("nodeclaim Initialized at %s, before the gate opened at %s", init.LastTransitionTime, opened.Time)
	}
}

// gatedWhileClosed waits for the claim of nodeType to be registered with cond still waiting,
// and checks that meanwhile Karpenter has not initialized the claim and no pod is on the node.
func gatedWhileClosed(t *testing.T, ctx context.Context, tr *fulfillmentTracker, nodeType, cond, taint string) {
	t.Helper()
	var f *v1alpha1.Fulfillment
	eventually(t, ctx, 3*time.Minute, "a "+nodeType+" node to register behind its "+cond+" gate", func(ctx context.Context) (bool, error) {
		for _, ff := range tr.byType(nodeType) {
			c := ff.StatusConditions().Get(cond)
			if ff.StatusConditions().IsTrue(v1alpha1.ConditionJoined) && c != nil && c.IsUnknown() && strings.HasPrefix(c.Reason, "Awaiting") {
				f = ff
				return true, nil
			}
		}
		return false, nil
	})
	claim := &karpv1.NodeClaim{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: f.Name}, claim); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := env.kube.List(ctx, pods); err != nil {
		t.Fatal(err)
	}
	// Read last: gate taints are only ever removed, so a taint still on the node now was on
	// it when the claim and the pods were read.
	node := &corev1.Node{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: f.Status.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == taint && tt.Effect == corev1.TaintEffectNoSchedule }) {
		t.Fatalf("node %s lost its %s taint while the test looked (taints %v); make the plugin slower", node.Name, taint, node.Spec.Taints)
	}
	if claim.StatusConditions().IsTrue(karpv1.ConditionTypeInitialized) {
		t.Errorf("Karpenter initialized nodeclaim %s while its %s gate was closed", claim.Name, cond)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node.Name {
			t.Errorf("pod %s/%s was scheduled on %s while its %s gate was closed", p.Namespace, p.Name, node.Name, cond)
		}
	}
}

// TestGPULateDevicePlugin: the GPU's device plugin registers 15s after the node: the claim
// is not initialized and the GPU pod not bound until the GPU gate opened.
func TestGPULateDevicePlugin(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	tr := trackFulfillments(t)
	nt := gpuNodeType("gpu-late", map[string]string{"gpu_delay": "15s"})
	nt.Deadlines.GPU = &metav1.Duration{Duration: 3 * time.Minute}
	startScenario(t, ctx, nodeClass("e2e-gpu-late", nt), nodePool("e2e-gpu-late", "e2e-gpu-late"))
	t.Cleanup(func() { cleanup(t, "gpu-late", "e2e-gpu-late", "e2e-gpu-late") })
	create(t, ctx, gpuDeployment("gpu-late", "e2e-gpu-late"))
	gatedWhileClosed(t, ctx, tr, "gpu-late", v1alpha1.ConditionGPUReady, v1alpha1.TaintGPU)
	eventually(t, ctx, 3*time.Minute, "the GPU pod to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "gpu-late"}, 1)
	})
	f := readyFulfillment(t, ctx, "gpu-late")
	gpu := f.StatusConditions().Get(v1alpha1.ConditionGPUReady)
	if !gpu.IsTrue() || gpu.Reason != v1alpha1.ReasonGateOpen {
		t.Errorf("GPUReady = %+v", gpu)
	}
	if f.Status.Stages.GPUReady == nil || f.Status.Stages.CNIReady == nil {
		t.Fatalf("stage times %+v", f.Status.Stages)
	}
	assertGateOrder(t, ctx, f, f.Status.Stages.GPUReady, "gpu-late")
}

// TestGPUNeverRegistersIsReplaced: a GPU that never registers misses its 10s deadline: the
// Fulfillment says precisely why, an event goes to the Fulfillment and the NodeClaim, the
// timeout is counted on the metrics endpoint, and under policy Replace the claim is replaced
// and its machine destroyed. (ReportOnly is covered by TestGateStagePolicies.)
func TestGPUNeverRegistersIsReplaced(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	tr := trackFulfillments(t)
	nt := gpuNodeType("gpu-never", map[string]string{"gpu_never": "true"})
	nt.Deadlines.GPU = &metav1.Duration{Duration: 10 * time.Second}
	class := nodeClass("e2e-gpu-never", nt)
	class.Spec.Readiness.Policy = v1alpha1.GatePolicyReplace
	startScenario(t, ctx, class, nodePool("e2e-gpu-never", "e2e-gpu-never"))
	t.Cleanup(func() { cleanup(t, "gpu-never", "e2e-gpu-never", "e2e-gpu-never") })
	before := gateTimeouts(t, "gpu", "gpu-never", "Replace")
	create(t, ctx, gpuDeployment("gpu-never", "e2e-gpu-never"))
	var late *v1alpha1.Fulfillment
	eventually(t, ctx, 3*time.Minute, "the GPU gate to miss its deadline", func(ctx context.Context) (bool, error) {
		for _, f := range tr.byType("gpu-never") {
			if c := f.StatusConditions().Get(v1alpha1.ConditionGPUReady); c != nil && c.IsFalse() {
				late = f
				return true, nil
			}
		}
		return false, nil
	})
	gpu := late.StatusConditions().Get(v1alpha1.ConditionGPUReady)
	if gpu.Reason != v1alpha1.ReasonGPUNotRegistered || gpu.Message != "nvidia.com/gpu allocatable 0 of 1 after 10s" {
		t.Errorf("GPUReady = %s: %q, want GPUNotRegistered: \"nvidia.com/gpu allocatable 0 of 1 after 10s\"", gpu.Reason, gpu.Message)
	}
	if late.Status.Phase != v1alpha1.PhaseDegraded && late.Status.Phase != v1alpha1.PhaseDestroying {
		t.Errorf("phase %s", late.Status.Phase)
	}
	eventually(t, ctx, 30*time.Second, "the timeout event on the fulfillment and the nodeclaim", func(ctx context.Context) (bool, error) {
		kinds := map[string]bool{}
		events := &corev1.EventList{}
		if err := env.kube.List(ctx, events, client.MatchingFields{"involvedObject.name": late.Name, "reason": v1alpha1.ReasonGPUNotRegistered}); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, "allocatable 0 of 1 after 10s") && strings.Contains(e.Message, "policy Replace") {
				kinds[e.InvolvedObject.Kind] = true
			}
		}
		return kinds["Fulfillment"] && kinds["NodeClaim"], nil
	})
	eventually(t, ctx, 30*time.Second, "the timeout to be counted", func(context.Context) (bool, error) {
		return gateTimeouts(t, "gpu", "gpu-never", "Replace") > before, nil
	})
	eventually(t, ctx, 3*time.Minute, "the late claim to be replaced and its machine destroyed", func(ctx context.Context) (bool, error) {
		err := env.kube.Get(ctx, client.ObjectKey{Name: late.Name}, &karpv1.NodeClaim{})
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		_, statErr := os.Stat(filepath.Join(env.vars["SIM_DIR"], late.Name))
		return err != nil && os.IsNotExist(statErr), nil
	})
}

// TestSlowCNIKeepsNodeOutOfService: the network plugin comes up 15s after registration;
// until then the node is not initialized and gets no pods.
func TestSlowCNIKeepsNodeOutOfService(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	tr := trackFulfillments(t)
	nt := nodeType("cni-slow", "0.01", map[string]string{"cni_delay": "15s"})
	nt.Deadlines.CNI = &metav1.Duration{Duration: 3 * time.Minute}
	startScenario(t, ctx, nodeClass("e2e-cni-slow", nt), nodePool("e2e-cni-slow", "e2e-cni-slow"))
	t.Cleanup(func() { cleanup(t, "cni-slow", "e2e-cni-slow", "e2e-cni-slow") })
	create(t, ctx, deployment("cni-slow", "e2e-cni-slow", 1, "500m"))
	gatedWhileClosed(t, ctx, tr, "cni-slow", v1alpha1.ConditionCNIReady, v1alpha1.TaintCNI)
	eventually(t, ctx, 3*time.Minute, "the pod to be bound once the CNI is up", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "cni-slow"}, 1)
	})
	f := readyFulfillment(t, ctx, "cni-slow")
	if c := f.StatusConditions().Get(v1alpha1.ConditionGPUReady); c.Reason != v1alpha1.ReasonGateNotApplicable {
		t.Errorf("GPUReady of a type without GPUs = %+v", c)
	}
	assertGateOrder(t, ctx, f, f.Status.Stages.CNIReady, "cni-slow")
}

// readyFulfillment waits for the one Fulfillment of nodeType to be Ready.
func readyFulfillment(t *testing.T, ctx context.Context, nodeType string) *v1alpha1.Fulfillment {
	t.Helper()
	var ready *v1alpha1.Fulfillment
	eventually(t, ctx, time.Minute, "the "+nodeType+" fulfillment to be Ready", func(ctx context.Context) (bool, error) {
		for _, f := range fulfillments(t, ctx) {
			if f.Spec.NodeType == nodeType && f.StatusConditions().Root().IsTrue() {
				ready = &f
				return true, nil
			}
		}
		return false, nil
	})
	return ready
}

// gateTimeouts scrapes the controller's metrics endpoint for the readiness gate timeouts of
// one gate, node type and policy.
func gateTimeouts(t *testing.T, gate, nodeType, policy string) float64 {
	t.Helper()
	return metricValue(t, "fulfiller_readiness_gate_timeouts_total", fmt.Sprintf(`gate=%q,instance_type=%q`, gate, nodeType), fmt.Sprintf(`policy=%q`, policy))
}

// metricValue scrapes the controller's metrics endpoint for the sum of a metric's series
// whose labels contain each of labels (in the exposition's order: sorted by name); 0 if it
// has none.
func metricValue(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, _ := sumOf(scrape(t), name, labels...)
	return v
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
