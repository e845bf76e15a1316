// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"
)

// schedulableLabel is the label virt-handler puts on the nodes it runs on; every launcher pod
// selects it. Every simulated infra node runs a (simulated) virt-handler, so it carries it.
const schedulableLabel = "kubevirt.io/schedulable"

// vCPUs is the number of vCPUs of a domain: sockets × cores × threads, each 1 when unset.
func vCPUs(cpu *virtv1.CPU) int64 {
	if cpu == nil {
		return 1
	}
	n := int64(1)
	for _, v := range []uint32{cpu.Sockets, cpu.Cores, cpu.Threads} {
		if v > 0 {
			n *= int64(v)
		}
	}
	return n
}

// guestMemory is the memory the guest sees: memory.guest, else the memory request.
func guestMemory(domain virtv1.DomainSpec) resource.Quantity {
	if domain.Memory != nil && domain.Memory.Guest != nil {
		return domain.Memory.Guest.DeepCopy()
	}
	return domain.Resources.Requests.Memory().DeepCopy()
}

// launcherPod is the part of a VMI's virt-launcher pod the scheduler looks at, rendered the
// way virt-controller's template service does: the VMI's node selector plus
// kubevirt.io/schedulable, its affinity and tolerations, and requests of vCPUs/ratio cores
// (all of them with dedicated CPUs, or the VMI's own request), the guest memory plus the
// overhead, and one of each GPU's and host device's deviceName.
func launcherPod(vmi *virtv1.VirtualMachineInstance, cpuAllocationRatio int, memoryOverhead resource.Quantity) *corev1.Pod {
	domain := vmi.Spec.Domain
	requests := corev1.ResourceList{}
	switch {
	case !domain.Resources.Requests.Cpu().IsZero():
		requests[corev1.ResourceCPU] = domain.Resources.Requests.Cpu().DeepCopy()
	case domain.CPU != nil && domain.CPU.DedicatedCPUPlacement:
		requests[corev1.ResourceCPU] = *resource.NewQuantity(vCPUs(domain.CPU), resource.DecimalSI)
	default:
		requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(vCPUs(domain.CPU)*1000/int64(cpuAllocationRatio), resource.DecimalSI)
	}
	memory := domain.Resources.Requests.Memory().DeepCopy()
	if memory.IsZero() {
		memory = guestMemory(domain)
	}
	memory.Add(memoryOverhead)
	requests[corev1.ResourceMemory] = memory
	addDevice := func(name string) {
		q := requests[corev1.ResourceName(name)]
		q.Add(*resource.NewQuantity(1, resource.DecimalSI))
		requests[corev1.ResourceName(name)] = q
	}
	for _, gpu := range domain.Devices.GPUs {
		addDevice(gpu.DeviceName)
	}
	for _, dev := range domain.Devices.HostDevices {
		addDevice(dev.DeviceName)
	}

	selector := map[string]string{schedulableLabel: "true"}
	for k, v := range vmi.Spec.NodeSelector {
		selector[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-" + vmi.Name, Namespace: vmi.Namespace},
		Spec: corev1.PodSpec{
			NodeSelector: selector,
			Affinity:     vmi.Spec.Affinity,
			Tolerations:  vmi.Spec.Tolerations,
			Containers:   []corev1.Container{{Name: "compute", Resources: corev1.ResourceRequirements{Requests: requests}}},
		},
	}
}

func podRequests(pod *corev1.Pod) corev1.ResourceList {
	return pod.Spec.Containers[0].Resources.Requests
}

// The scheduler's filter reasons (kube-scheduler's NodeUnschedulable, TaintToleration,
// NodeAffinity and NodeResourcesFit plugins), and its preemption verdicts.
const (
	reasonNodeUnschedulable = "node(s) were unschedulable"
	reasonUntoleratedTaint  = "node(s) had untolerated taint(s)"
	reasonNodeAffinity      = "node(s) didn't match Pod's node affinity/selector"
	preemptionNotHelpful    = "Preemption is not helpful for scheduling"
	preemptionNoVictims     = "No preemption victims found for incoming pod"
)

// nodeFit is one node's verdict: the reasons it does not fit, and whether they are of the
// kind preemption could resolve (too few resources) or not.
type nodeFit struct {
	reasons    []string
	resolvable bool
}

// filterNode runs the scheduler's filters in the default profile's order; the first that
// rejects the node decides, as in kube-scheduler.
func filterNode(pod *corev1.Pod, node Node, used corev1.ResourceList) nodeFit {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: map[string]string{schedulableLabel: "true"}}}
	for k, v := range node.Labels {
		n.Labels[k] = v
	}
	n.Spec.Taints = node.Taints
	if node.Unschedulable {
		return nodeFit{reasons: []string{reasonNodeUnschedulable}}
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	if untolerated {
		return nodeFit{reasons: []string{reasonUntoleratedTaint}}
	}
	for k, v := range pod.Spec.NodeSelector {
		if n.Labels[k] != v {
			return nodeFit{reasons: []string{reasonNodeAffinity}}
		}
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(n); err != nil || !ok {
		return nodeFit{reasons: []string{reasonNodeAffinity}}
	}
	var insufficient []string
	requests := podRequests(pod)
	names := make([]string, 0, len(requests))
	for name := range requests {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		want := requests[corev1.ResourceName(name)]
		if want.IsZero() {
			continue
		}
		free := node.Allocatable[corev1.ResourceName(name)].DeepCopy()
		free.Sub(used[corev1.ResourceName(name)])
		if free.Cmp(want) < 0 {
			insufficient = append(insufficient, "Insufficient "+name)
		}
	}
	if len(insufficient) > 0 {
		return nodeFit{reasons: insufficient, resolvable: true}
	}
	return nodeFit{}
}

// schedule picks the node for a launcher pod: the fitting node with the most free memory
// (ties: by name). When none fits, it returns kube-scheduler's message for the pod's
// PodScheduled condition.
func schedule(pod *corev1.Pod, nodes []Node, used map[string]corev1.ResourceList) (string, string) {
	if len(nodes) == 0 {
		return "", "no nodes available to schedule pods"
	}
	reasons := map[string]int{}
	preemption := map[string]int{}
	best, bestFree := "", resource.Quantity{}
	for _, node := range nodes {
		fit := filterNode(pod, node, used[node.Name])
		if len(fit.reasons) == 0 {
			free := node.Allocatable[corev1.ResourceMemory].DeepCopy()
			free.Sub(used[node.Name][corev1.ResourceMemory])
			if best == "" || free.Cmp(bestFree) > 0 {
				best, bestFree = node.Name, free
			}
			continue
		}
		for _, r := range fit.reasons {
			reasons[r]++
		}
		if fit.resolvable {
			preemption[preemptionNoVictims]++
		} else {
			preemption[preemptionNotHelpful]++
		}
	}
	if best != "" {
		return best, ""
	}
	return "", fitError(len(nodes), reasons, preemption)
}

// fitError renders kube-scheduler's FitError: the reasons counted over nodes, sorted, then
// what the post-filter plugins (dynamic resources, preemption) said.
func fitError(nodes int, reasons, preemption map[string]int) string {
	histogram := func(m map[string]int) string {
		parts := make([]string, 0, len(m))
		for r, n := range m {
			parts = append(parts, fmt.Sprintf("%d %s", n, r))
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("0/%d nodes are available: %s. no new claims to deallocate, preemption: 0/%d nodes are available: %s.",
		nodes, histogram(reasons), nodes, histogram(preemption))
}

// addResources adds b to a.
func addResources(a, b corev1.ResourceList) corev1.ResourceList {
	out := a.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name, q := range b {
		sum := out[name]
		sum.Add(q)
		out[name] = sum
	}
	return out
}
