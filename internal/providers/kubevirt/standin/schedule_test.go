// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"
)

func infraNode(name, cpu, memory string, extra ...string) Node {
	n := Node{Name: name, Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
	}}
	for i := 0; i+1 < len(extra); i += 2 {
		n.Allocatable[corev1.ResourceName(extra[i])] = resource.MustParse(extra[i+1])
	}
	return n
}

func vmiWith(cores uint32, memory string, mutate ...func(*virtv1.VirtualMachineInstance)) *virtv1.VirtualMachineInstance {
	guest := resource.MustParse(memory)
	vmi := &virtv1.VirtualMachineInstance{}
	vmi.Name, vmi.Namespace = "vm", "infra"
	vmi.Spec.Domain.CPU = &virtv1.CPU{Cores: cores}
	vmi.Spec.Domain.Memory = &virtv1.Memory{Guest: &guest}
	for _, m := range mutate {
		m(vmi)
	}
	return vmi
}

func TestLauncherRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		vmi  *virtv1.VirtualMachineInstance
		want map[corev1.ResourceName]string
	}{
		{"vcpus over the allocation ratio", vmiWith(4, "8Gi", func(v *virtv1.VirtualMachineInstance) { v.Spec.Domain.CPU.Sockets, v.Spec.Domain.CPU.Threads = 2, 2 }),
			map[corev1.ResourceName]string{"cpu": "1600m", "memory": "8320Mi"}},
		{"dedicated cpus", vmiWith(4, "8Gi", func(v *virtv1.VirtualMachineInstance) { v.Spec.Domain.CPU.DedicatedCPUPlacement = true }),
			map[corev1.ResourceName]string{"cpu": "4", "memory": "8320Mi"}},
		{"own requests", vmiWith(4, "8Gi", func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Resources.Requests = corev1.ResourceList{"cpu": resource.MustParse("3"), "memory": resource.MustParse("9Gi")}
		}), map[corev1.ResourceName]string{"cpu": "3", "memory": "9344Mi"}},
		{"gpus and host devices", vmiWith(1, "1Gi", func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.GPUs = []virtv1.GPU{{Name: "g1", DeviceName: "nvidia.com/A10"}, {Name: "g2", DeviceName: "nvidia.com/A10"}}
			v.Spec.Domain.Devices.HostDevices = []virtv1.HostDevice{{Name: "nic", DeviceName: "intel.com/sriov"}}
		}), map[corev1.ResourceName]string{"cpu": "100m", "memory": "1152Mi", "nvidia.com/A10": "2", "intel.com/sriov": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := podRequests(launcherPod(tc.vmi, 10, resource.MustParse("128Mi")))
			if len(got) != len(tc.want) {
				t.Errorf("requests = %v, want %v", got, tc.want)
			}
			for name, want := range tc.want {
				if q := got[name]; q.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s = %s, want %s", name, q.String(), want)
				}
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	tainted := infraNode("gpu-1", "16", "64Gi")
	tainted.Taints = []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	labelled := infraNode("zone-b-1", "16", "64Gi")
	labelled.Labels = map[string]string{"zone": "b"}
	cordoned := infraNode("cordoned", "16", "64Gi")
	cordoned.Unschedulable = true
	small := infraNode("small", "1", "1Gi")
	small.Labels = map[string]string{"zone": "a"}

	for _, tc := range []struct {
		name     string
		nodes    []Node
		used     map[string]corev1.ResourceList
		vmi      *virtv1.VirtualMachineInstance
		wantNode string
		wantMsg  string
	}{
		{name: "fits on the node with the most free memory",
			nodes: []Node{infraNode("a", "4", "16Gi"), infraNode("b", "4", "32Gi")}, vmi: vmiWith(4, "8Gi"), wantNode: "b"},
		{name: "used room counts",
			nodes: []Node{infraNode("a", "4", "16Gi"), infraNode("b", "4", "32Gi")},
			used:  map[string]corev1.ResourceList{"b": {"memory": resource.MustParse("30Gi")}}, vmi: vmiWith(4, "8Gi"), wantNode: "a"},
		{name: "not enough memory anywhere",
			nodes: []Node{infraNode("a", "4", "16Gi"), infraNode("b", "4", "16Gi")}, vmi: vmiWith(4, "32Gi"),
			wantMsg: "0/2 nodes are available: 2 Insufficient memory. no new claims to deallocate, preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."},
		{name: "cpu and memory",
			nodes: []Node{infraNode("a", "1", "4Gi")}, vmi: vmiWith(16, "8Gi"),
			wantMsg: "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."},
		{name: "selector, taint, cordon and room",
			nodes: []Node{tainted, labelled, cordoned, small},
			vmi:   vmiWith(2, "4Gi", func(v *virtv1.VirtualMachineInstance) { v.Spec.NodeSelector = map[string]string{"zone": "a"} }),
			wantMsg: "0/4 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable. " +
				"no new claims to deallocate, preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."},
		{name: "toleration and affinity",
			nodes: []Node{tainted, labelled},
			vmi: vmiWith(2, "4Gi", func(v *virtv1.VirtualMachineInstance) {
				v.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
				v.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpDoesNotExist}}}},
				}}}
			}), wantNode: "gpu-1"},
		{name: "gpu device",
			nodes: []Node{infraNode("a", "16", "64Gi", "nvidia.com/A10", "1")},
			vmi: vmiWith(2, "4Gi", func(v *virtv1.VirtualMachineInstance) {
				v.Spec.Domain.Devices.GPUs = []virtv1.GPU{{Name: "g1", DeviceName: "nvidia.com/A10"}, {Name: "g2", DeviceName: "nvidia.com/A10"}}
			}),
			wantMsg: "0/1 nodes are available: 1 Insufficient nvidia.com/A10. no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."},
		{name: "no nodes", vmi: vmiWith(1, "1Gi"), wantMsg: "no nodes available to schedule pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, msg := schedule(launcherPod(tc.vmi, 10, resource.Quantity{}), tc.nodes, tc.used)
			if node != tc.wantNode || msg != tc.wantMsg {
				t.Errorf("schedule = %q, %q\nwant       %q, %q", node, msg, tc.wantNode, tc.wantMsg)
			}
		})
	}
}

func TestImagePullState(t *testing.T) {
	for _, tc := range []struct{ image, full, tagged string }{
		{"nope", "docker.io/library/nope:latest", "nope:latest"},
		{"me/nope:1", "docker.io/me/nope:1", "me/nope:1"},
		{"quay.io/containerdisks/nope", "quay.io/containerdisks/nope:latest", "quay.io/containerdisks/nope:latest"},
		{"localhost:5000/disk@sha256:ab", "localhost:5000/disk@sha256:ab", "localhost:5000/disk@sha256:ab"},
	} {
		if got := fullImageName(tc.image); got != tc.full {
			t.Errorf("fullImageName(%s) = %s, want %s", tc.image, got, tc.full)
		}
		reason, msg, next := imagePullState(tc.image, 0, 8e9)
		wantErr := `rpc error: code = NotFound desc = failed to pull and unpack image "` + tc.full + `": failed to resolve reference "` + tc.full + `": ` + tc.full + ": not found"
		if reason != reasonErrImagePull || msg != wantErr || next != 2e9 {
			t.Errorf("at 0s: %s %q %s", reason, msg, next)
		}
		reason, msg, next = imagePullState(tc.image, 3e9, 8e9)
		if reason != reasonImagePullBackOff || msg != `Back-off pulling image "`+tc.tagged+`": ErrImagePull: `+wantErr || next != 5e9 {
			t.Errorf("at 3s: %s %q %s", reason, msg, next)
		}
	}
}
