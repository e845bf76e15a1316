// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fullVM uses every field modules/kubevirt may set: CPU topology, guest memory and
// requests, a DataVolume template and a containerDisk, a cloud-init Secret, the pod network
// and a Multus network, GPUs and host devices, node selector, affinity, tolerations and an
// eviction strategy.
func fullVM(ns string) *virtv1.VirtualMachine {
	vm := withDataVolumeDisk(testVMObject(ns, "full", bootImage, "full-userdata", 2, "4Gi"), "full-root", "fast", bootImage)
	vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes,
		virtv1.Volume{Name: "scratch", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: bootImage}}})
	vm.Spec.Template.Spec.Domain.Devices.Disks = append(vm.Spec.Template.Spec.Domain.Devices.Disks,
		virtv1.Disk{Name: "scratch", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}})
	spec := &vm.Spec.Template.Spec
	spec.Domain.CPU = &virtv1.CPU{Cores: 2, Sockets: 2, Threads: 1, Model: "host-passthrough"}
	spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}
	spec.Domain.Devices.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GA102GL_A10"}}
	spec.Domain.Devices.HostDevices = []virtv1.HostDevice{{Name: "nvme", DeviceName: "example.com/nvme"}}
	spec.Domain.Devices.Interfaces = append(spec.Domain.Devices.Interfaces,
		virtv1.Interface{Name: "storage", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Bridge: &virtv1.InterfaceBridge{}}})
	spec.Networks = append(spec.Networks, virtv1.Network{Name: "storage", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: "infra/storage-net"}}})
	spec.NodeSelector = map[string]string{"gpu": "a10"}
	spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}},
	}}}
	spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrate)
	spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	vm.Labels["karpenter.sh/nodepool"] = "default"
	vm.Labels["fulfiller.sh/cluster"] = "test"
	return vm
}

// TestCRDsHoldRealObjects: the API server keeps every field of real VMs, VMIs and
// DataVolumes (nothing pruned), and rejects what KubeVirt's schema rejects.
func TestCRDsHoldRealObjects(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()

	vm := fullVM(ns)
	sent := vm.DeepCopy()
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	got := &virtv1.VirtualMachine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, sent.Spec) || !equality.Semantic.DeepEqual(got.Labels, sent.Labels) {
		t.Errorf("the API server changed the VM:\nsent %+v\ngot  %+v", sent.Spec, got.Spec)
	}
	// The status subresource: a status in a create or update of the object is ignored.
	got.Status.PrintableStatus = virtv1.VirtualMachineStatusRunning
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.PrintableStatus != "" {
		t.Errorf("a VM update wrote its status: %q", got.Status.PrintableStatus)
	}

	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: ns}, Spec: *sent.Spec.Template.Spec.DeepCopy()}
	vmi.Status.Phase = virtv1.Scheduling
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	gotVMI := &virtv1.VirtualMachineInstance{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vmi), gotVMI); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(gotVMI.Spec, sent.Spec.Template.Spec) || gotVMI.Status.Phase != virtv1.Scheduling {
		t.Errorf("the API server changed the VMI (no status subresource, as in KubeVirt): phase %q", gotVMI.Status.Phase)
	}

	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "full-root", Namespace: ns}, Spec: sent.Spec.DataVolumeTemplates[0].Spec}
	if err := c.Create(ctx, dv); err != nil {
		t.Fatal(err)
	}
	gotDV := &cdiv1.DataVolume{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dv), gotDV); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(gotDV.Spec, dv.Spec) {
		t.Errorf("the API server changed the DataVolume:\nsent %+v\ngot  %+v", dv.Spec, gotDV.Spec)
	}

	for _, tc := range []struct {
		name  string
		patch func(obj map[string]any)
		field string
	}{
		{"cores is no number", func(obj map[string]any) {
			obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["domain"].(map[string]any)["cpu"] = map[string]any{"cores": "four"}
		}, "spec.template.spec.domain.cpu.cores"},
		{"no template", func(obj map[string]any) { delete(obj["spec"].(map[string]any), "template") }, "spec.template"},
		{"no domain devices", func(obj map[string]any) {
			delete(obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["domain"].(map[string]any), "devices")
		}, "spec.template.spec.domain.devices"},
	} {
		obj, err := toUnstructured(fullVM(ns))
		if err != nil {
			t.Fatal(err)
		}
		obj.SetName("invalid")
		tc.patch(obj.Object)
		err = c.Create(ctx, obj)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: create = %v, want an Invalid error naming %s", tc.name, err, tc.field)
		}
	}
}

func toUnstructured(vm *virtv1.VirtualMachine) (*unstructured.Unstructured, error) {
	vm.APIVersion, vm.Kind = virtv1.GroupVersion.String(), "VirtualMachine"
	obj, err := runtimeToUnstructured(vm)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

func runtimeToUnstructured(obj any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}
