// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	bootImage  = "quay.io/containerdisks/ubuntu:24.04"
	crashImage = "quay.io/containerdisks/broken:1"
	idleImage  = "quay.io/containerdisks/no-cloud-init:1"
)

var testImages = map[string]Guest{bootImage: GuestBoots, crashImage: GuestCrashes, idleImage: GuestNeverJoins}

// TestRunsAndJoins: a VM with runStrategy Always gets a VMI that walks Pending, Scheduling,
// Scheduled and Running; its guest boots from exactly the cloud-init Secret, joins with the
// bootstrap token in it and registers its Node as kubevirt://<vm>. Deleting the VM deletes
// the VMI and powers the guest off.
func TestRunsAndJoins(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()
	machines := startStandin(t, ns, Config{Images: testImages})

	name := ns[:min(len(ns), 40)] + "-vm"
	userData := joinUserData(t, cs, name)
	if err := c.Create(ctx, userDataSecret(ns, name+"-userdata", userData)); err != nil {
		t.Fatal(err)
	}
	vm := testVMObject(ns, name, bootImage, name+"-userdata", 3, "3Gi")
	vm.Spec.Template.Spec.Domain.Devices.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/A10"}}
	key := types.NamespacedName{Namespace: ns, Name: name}
	statuses := recordStatuses(t, c, key)
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}

	vm = waitVM(t, c, key, "Running and ready", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning && vm.Status.Ready
	})
	if !vm.Status.Created || vm.Status.RunStrategy != virtv1.RunStrategyAlways || vm.Status.ObservedGeneration != vm.Generation {
		t.Errorf("vm status: %s, runStrategy %s, generations %d/%d", describeVM(vm), vm.Status.RunStrategy, vm.Status.ObservedGeneration, vm.Generation)
	}
	if !containsString(vm.Finalizers, virtv1.VirtualMachineControllerFinalizer) {
		t.Errorf("vm finalizers = %v", vm.Finalizers)
	}
	// The recorder polls on its own: it may not have seen Running yet, but it must have seen
	// Starting first and nothing but Starting and Running.
	if got := statuses.statuses(); len(got) == 0 || got[0] != virtv1.VirtualMachineStatusStarting || len(got) > 2 || len(got) == 2 && got[1] != virtv1.VirtualMachineStatusRunning {
		t.Errorf("printable statuses = %v, want Starting, then Running", got)
	}

	vmi := &virtv1.VirtualMachineInstance{}
	if err := c.Get(ctx, key, vmi); err != nil {
		t.Fatal(err)
	}
	var phases []virtv1.VirtualMachineInstancePhase
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		phases = append(phases, ts.Phase)
	}
	if strings.Join(phaseStrings(phases), ",") != "Pending,Scheduling,Scheduled,Running" {
		t.Errorf("vmi phases = %v", phases)
	}
	if ref := metav1.GetControllerOf(vmi); ref == nil || ref.UID != vm.UID || vmi.Labels["kubevirt.io/vm"] != name {
		t.Errorf("vmi owner %v, labels %v", ref, vmi.Labels)
	}
	if vmi.Status.NodeName != "infra-gpu" || vmi.Labels[virtv1.NodeNameLabel] != "infra-gpu" || len(vmi.Status.ActivePods) != 1 {
		t.Errorf("vmi node %q, label %q, active pods %v (the GPU fits only infra-gpu)", vmi.Status.NodeName, vmi.Labels[virtv1.NodeNameLabel], vmi.Status.ActivePods)
	}
	if len(vmi.Status.Interfaces) != 1 || !strings.HasPrefix(vmi.Status.Interfaces[0].IP, "10.244.") {
		t.Errorf("vmi interfaces = %+v", vmi.Status.Interfaces)
	}
	if c := vmiCondition(vmi, virtv1.VirtualMachineInstanceReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("vmi Ready = %+v", c)
	}

	// The guest joined with the token in the Secret's user data, byte for byte.
	vmiKey := types.NamespacedName{Namespace: ns, Name: name}
	if got, err := os.ReadFile(filepath.Join(machines.Dir, ns, name, "user-data")); err != nil || !bytes.Equal(got, userData) {
		t.Errorf("the guest's user data differs from the Secret's (%v)", err)
	}
	node := waitNode(t, cs, name)
	if node.Spec.ProviderID != "kubevirt://"+name {
		t.Errorf("providerID = %q", node.Spec.ProviderID)
	}
	for res, want := range map[corev1.ResourceName]string{"cpu": "3", "memory": "3Gi", "nvidia.com/gpu": "1"} {
		if q := node.Status.Capacity[res]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("node capacity %s = %s, want %s", res, q.String(), want)
		}
	}

	if err := c.Delete(ctx, vm); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	waitGone(t, c, &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if machines.Running(vmiKey) {
		t.Error("the guest still runs after its VM was deleted")
	}
	if _, err := os.Stat(filepath.Join(machines.Dir, ns, name)); !os.IsNotExist(err) {
		t.Errorf("the guest's ephemeral disk survives: %v", err)
	}
}

// TestUnschedulable: a VM that fits on no infra node shows ErrorUnschedulable with the
// scheduler's message, and runs once room is freed.
func TestUnschedulable(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()
	startStandin(t, ns, Config{Images: testImages, Nodes: []Node{infraNode("infra-1", "4", "8Gi")}})

	first := testVMObject(ns, "first", bootImage, "first-userdata", 2, "6Gi")
	second := testVMObject(ns, "second", bootImage, "second-userdata", 2, "6Gi")
	for _, vm := range []*virtv1.VirtualMachine{first, second} {
		if err := c.Create(ctx, userDataSecret(ns, vm.Name+"-userdata", joinUserData(t, cs, ns+"-"+vm.Name))); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitVM(t, c, client.ObjectKeyFromObject(first), "Running", printable(virtv1.VirtualMachineStatusRunning))
	if err := c.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	vm := waitVM(t, c, client.ObjectKeyFromObject(second), "ErrorUnschedulable", printable(virtv1.VirtualMachineStatusUnschedulable))
	want := "0/1 nodes are available: 1 Insufficient memory. no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
	if c := vmCondition(vm, virtv1.VirtualMachineConditionType(corev1.PodScheduled)); c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || c.Message != want {
		t.Errorf("PodScheduled condition = %+v\nwant message %q", c, want)
	}
	if c := vmCondition(vm, virtv1.VirtualMachineReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != virtv1.GuestNotRunningReason {
		t.Errorf("Ready condition = %+v", c)
	}

	if err := c.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	vm = waitVM(t, c, client.ObjectKeyFromObject(second), "Running once the first is gone", printable(virtv1.VirtualMachineStatusRunning))
	if c := vmCondition(vm, virtv1.VirtualMachineConditionType(corev1.PodScheduled)); c != nil {
		t.Errorf("PodScheduled stays on a running VM: %+v", c)
	}
}

// TestImagePullFailure: a containerDisk image the registry does not have shows ErrImagePull,
// then ImagePullBackOff, with the kubelet's messages; no guest is started.
func TestImagePullFailure(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()
	machines := startStandin(t, ns, Config{Images: testImages, Timings: Timings{ImagePullBackOff: 2 * time.Second}})

	vm := testVMObject(ns, "nope", "quay.io/containerdisks/nope:1", "nope-userdata", 1, "1Gi")
	if err := c.Create(ctx, userDataSecret(ns, "nope-userdata", []byte("#cloud-config\n"))); err != nil {
		t.Fatal(err)
	}
	statuses := recordStatuses(t, c, client.ObjectKeyFromObject(vm))
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	got := waitVM(t, c, client.ObjectKeyFromObject(vm), "ImagePullBackOff after ErrImagePull", func(*virtv1.VirtualMachine) bool {
		return statuses.saw(virtv1.VirtualMachineStatusErrImagePull) && statuses.saw(virtv1.VirtualMachineStatusImagePullBackOff)
	})
	sync := vmCondition(got, virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceSynchronized))
	pullErr := `rpc error: code = NotFound desc = failed to pull and unpack image "quay.io/containerdisks/nope:1": failed to resolve reference "quay.io/containerdisks/nope:1": quay.io/containerdisks/nope:1: not found`
	if sync == nil || sync.Status != corev1.ConditionFalse ||
		!(sync.Reason == reasonErrImagePull && sync.Message == pullErr || sync.Reason == reasonImagePullBackOff && sync.Message == `Back-off pulling image "quay.io/containerdisks/nope:1": ErrImagePull: `+pullErr) {
		t.Errorf("Synchronized condition = %+v", sync)
	}
	if machines.Running(client.ObjectKeyFromObject(vm)) {
		t.Error("a guest runs without its image")
	}
}

// TestMissingDataVolume: a volume naming a DataVolume that does not exist shows
// ErrorPvcNotFound (KubeVirt v1.7.0 has no ErrorDataVolumeNotFound any more), and the VM
// starts once the DataVolume appears and is imported.
func TestMissingDataVolume(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()
	startStandin(t, ns, Config{Images: testImages})
	if err := c.Create(ctx, storageClass(ns+"-fast")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), storageClass(ns+"-fast")) })

	vm := testVMObject(ns, "dv-vm", bootImage, "dv-vm-userdata", 1, "1Gi")
	vm.Spec.Template.Spec.Volumes[0].VolumeSource = virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "root"}}
	if err := c.Create(ctx, userDataSecret(ns, "dv-vm-userdata", joinUserData(t, cs, ns+"-dv-vm"))); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	got := waitVM(t, c, client.ObjectKeyFromObject(vm), "ErrorPvcNotFound", printable(virtv1.VirtualMachineStatusPvcNotFound))
	msg := "PVC " + ns + "/root does not exist, waiting for it to appear"
	sync := vmCondition(got, virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceSynchronized))
	sched := vmCondition(got, virtv1.VirtualMachineConditionType(corev1.PodScheduled))
	if sync == nil || sync.Reason != reasonFailedPvcNotFound || sync.Message != msg || sched == nil || sched.Reason != corev1.PodReasonUnschedulable || sched.Message != msg {
		t.Errorf("conditions: %s", describeVM(got))
	}

	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: ns}, Spec: withDataVolumeDisk(vm.DeepCopy(), "root", ns+"-fast", bootImage).Spec.DataVolumeTemplates[0].Spec}
	if err := c.Create(ctx, dv); err != nil {
		t.Fatal(err)
	}
	waitVM(t, c, client.ObjectKeyFromObject(vm), "Running", printable(virtv1.VirtualMachineStatusRunning))
}

// TestUnknownStorageClass: a DataVolume template of a storage class that does not exist
// stays unbound (CDI's ErrClaimNotValid) and the VM Provisioning, with no VMI; once the class
// exists the disk is imported and the VM runs from it.
func TestUnknownStorageClass(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()
	machines := startStandin(t, ns, Config{Images: testImages, Timings: Timings{Import: 2 * time.Second}})

	class := ns + "-later"
	vm := withDataVolumeDisk(testVMObject(ns, "sc-vm", bootImage, "sc-vm-userdata", 1, "1Gi"), "sc-vm-root", class, bootImage)
	if err := c.Create(ctx, userDataSecret(ns, "sc-vm-userdata", joinUserData(t, cs, ns+"-sc-vm"))); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	waitVM(t, c, client.ObjectKeyFromObject(vm), "Provisioning", printable(virtv1.VirtualMachineStatusProvisioning))
	dv := &cdiv1.DataVolume{}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sc-vm-root"}, dv); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return dvConditionStatus(dv, cdiv1.DataVolumeBound) == corev1.ConditionFalse, nil
	})
	if err != nil || dv.Status.Phase != cdiv1.PhaseUnset || metav1.GetControllerOf(dv) == nil {
		t.Fatalf("datavolume: %v, phase %q, owner %v", err, dv.Status.Phase, metav1.GetControllerOf(dv))
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vm), &virtv1.VirtualMachineInstance{}); !apierrors.IsNotFound(err) {
		t.Errorf("a VMI exists before its disk: %v", err)
	}

	if err := c.Create(ctx, storageClass(class)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), storageClass(class)) })
	waitVM(t, c, client.ObjectKeyFromObject(vm), "Running", printable(virtv1.VirtualMachineStatusRunning))
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sc-vm-root"}, dv); err != nil || dv.Status.Phase != cdiv1.Succeeded {
		t.Errorf("datavolume phase %q (%v)", dv.Status.Phase, err)
	}
	waitNode(t, cs, ns+"-sc-vm")
	if !machines.Running(client.ObjectKeyFromObject(vm)) {
		t.Error("no guest runs")
	}
}

// TestCrashLoop: a guest whose launcher fails before the domain runs is restarted with a
// growing back-off, and the VM shows CrashLoopBackOff.
func TestCrashLoop(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()
	startStandin(t, ns, Config{Images: testImages, Timings: Timings{CrashLoopBackOff: 500 * time.Millisecond, MaxCrashLoopBackOff: 5 * time.Second}})

	vm := testVMObject(ns, "crash", crashImage, "crash-userdata", 1, "1Gi")
	if err := c.Create(ctx, userDataSecret(ns, "crash-userdata", []byte("#cloud-config\n"))); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	got := waitVM(t, c, client.ObjectKeyFromObject(vm), "CrashLoopBackOff after two failed starts", func(vm *virtv1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusCrashLoopBackOff && vm.Status.StartFailure != nil && vm.Status.StartFailure.ConsecutiveFailCount >= 2
	})
	if got.Status.StartFailure.RetryAfterTimestamp == nil {
		t.Errorf("start failure without retry time: %+v", got.Status.StartFailure)
	}
}

// TestNeverJoins: a guest that boots but never joins leaves the VM Running without a Node.
func TestNeverJoins(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()
	machines := startStandin(t, ns, Config{Images: testImages})

	name := ns[:min(len(ns), 40)] + "-idle"
	vm := testVMObject(ns, name, idleImage, "idle-userdata", 1, "1Gi")
	// The deprecated spec.running, which means runStrategy Always.
	vm.Spec.RunStrategy, vm.Spec.Running = nil, ptr.To(true)
	if err := c.Create(ctx, userDataSecret(ns, "idle-userdata", joinUserData(t, cs, name))); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	waitVM(t, c, client.ObjectKeyFromObject(vm), "Running", printable(virtv1.VirtualMachineStatusRunning))
	logPath := machines.LogPath(client.ObjectKeyFromObject(vm))
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(logPath)
		return strings.Contains(string(data), "never joins"), nil
	})
	if err != nil {
		data, _ := os.ReadFile(logPath)
		t.Fatalf("the guest did not boot as one that never joins:\n%s", data)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a guest that never joins has a Node: %v", err)
	}
}

func waitNode(t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		node = n
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for Node %s to be Ready: %v", name, err)
	}
	return node
}

func phaseStrings(phases []virtv1.VirtualMachineInstancePhase) []string {
	out := make([]string, len(phases))
	for i, p := range phases {
		out[i] = string(p)
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDataVolumeImportError: a DataVolume importing an image the registry does not have
// fails its importer, and the VM shows DataVolumeError.
func TestDataVolumeImportError(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	ns := namespace(t, cs)
	ctx := context.Background()
	startStandin(t, ns, Config{Images: testImages})
	if err := c.Create(ctx, storageClass(ns+"-fast")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), storageClass(ns+"-fast")) })

	vm := withDataVolumeDisk(testVMObject(ns, "dv-err", bootImage, "dv-err-userdata", 1, "1Gi"), "dv-err-root", ns+"-fast", "quay.io/containerdisks/nope:1")
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	waitVM(t, c, client.ObjectKeyFromObject(vm), "DataVolumeError", printable(virtv1.VirtualMachineStatusDataVolumeError))
	dv := &cdiv1.DataVolume{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dv-err-root"}, dv); err != nil {
		t.Fatal(err)
	}
	for _, cond := range dv.Status.Conditions {
		if cond.Type == cdiv1.DataVolumeRunning && (cond.Status != corev1.ConditionFalse || cond.Reason != "Error" || !strings.Contains(cond.Message, "quay.io/containerdisks/nope:1")) {
			t.Errorf("importer condition = %+v", cond)
		}
	}
	if dv.Status.Phase != cdiv1.ImportInProgress {
		t.Errorf("datavolume phase %q", dv.Status.Phase)
	}
}
