// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// TestObserve: where a VM is, decided from the VM and its VMI as virt-controller leaves them.
func TestObserve(t *testing.T) {
	key := types.NamespacedName{Namespace: "tenant", Name: "n1"}
	vm := func(ps virtv1.VirtualMachinePrintableStatus, conds ...virtv1.VirtualMachineCondition) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: "tenant"},
			Status: virtv1.VirtualMachineStatus{PrintableStatus: ps, Conditions: conds}}
	}
	vmi := func(phase virtv1.VirtualMachineInstancePhase, conds ...virtv1.VirtualMachineInstanceCondition) *virtv1.VirtualMachineInstance {
		return &virtv1.VirtualMachineInstance{Status: virtv1.VirtualMachineInstanceStatus{Phase: phase, NodeName: "infra-1", Conditions: conds}}
	}
	const fitError = "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
	const pullError = `failed to pull and unpack image "quay.io/containerdisks/nope:1": not found`
	deleting := vm(virtv1.VirtualMachineStatusTerminating)
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		name string
		vm   *virtv1.VirtualMachine
		vmi  *virtv1.VirtualMachineInstance
		want family.Observation
		msg  string // in the message
	}{
		{name: "gone", want: family.Observation{Gone: true}, msg: "virtualmachine tenant/n1 is gone"},
		{name: "being deleted", vm: deleting, want: family.Observation{Gone: true}, msg: "being deleted"},
		{name: "no vmi yet", vm: vm(virtv1.VirtualMachineStatusStopped, virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: "VMINotExists", Message: "VMI does not exist"}),
			want: family.Observation{Reason: v1alpha1.ReasonVMScheduling}, msg: "Stopped: VMI does not exist"},
		{name: "scheduling", vm: vm(virtv1.VirtualMachineStatusStarting), vmi: vmi(virtv1.Scheduling),
			want: family.Observation{Reason: v1alpha1.ReasonVMScheduling}, msg: "Starting: VMI Scheduling, waiting for its launcher pod"},
		{name: "pending without phase", vm: vm(""), vmi: vmi(""),
			want: family.Observation{Reason: v1alpha1.ReasonVMScheduling}, msg: "Starting: VMI Pending"},
		{name: "unschedulable", vm: vm(virtv1.VirtualMachineStatusUnschedulable),
			vmi:  vmi(virtv1.Scheduling, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: fitError}),
			want: family.Observation{Reason: v1alpha1.ReasonVMUnschedulable, CapacityFailure: true}, msg: "ErrorUnschedulable: " + fitError},
		{name: "unschedulable, vmi not readable", vm: vm(virtv1.VirtualMachineStatusUnschedulable,
			virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: fitError}),
			want: family.Observation{Reason: v1alpha1.ReasonVMUnschedulable, CapacityFailure: true}, msg: fitError},
		{name: "image pull", vm: vm(virtv1.VirtualMachineStatusErrImagePull),
			vmi:  vmi(virtv1.Scheduling, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: "ErrImagePull", Message: pullError}),
			want: family.Observation{Reason: v1alpha1.ReasonVMImagePullFailed}, msg: "ErrImagePull: " + pullError},
		{name: "image pull back-off", vm: vm(virtv1.VirtualMachineStatusImagePullBackOff,
			virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceSynchronized), Status: corev1.ConditionFalse, Reason: "ImagePullBackOff", Message: "Back-off pulling image"}),
			want: family.Observation{Reason: v1alpha1.ReasonVMImagePullFailed}, msg: "ImagePullBackOff: Back-off pulling image"},
		{name: "crash loop", vm: vm(virtv1.VirtualMachineStatusCrashLoopBackOff,
			virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: "VMINotExists", Message: "VMI does not exist"}),
			want: family.Observation{Reason: v1alpha1.ReasonVMStartFailed}, msg: "CrashLoopBackOff: VMI does not exist"},
		{name: "provisioning", vm: vm(virtv1.VirtualMachineStatusProvisioning),
			want: family.Observation{Reason: v1alpha1.ReasonVMStarting}, msg: "Provisioning"},
		{name: "scheduled", vm: vm(virtv1.VirtualMachineStatusStarting), vmi: vmi(virtv1.Scheduled),
			want: family.Observation{Reason: v1alpha1.ReasonVMStarting}, msg: "scheduled to infra-1"},
		{name: "running", vm: vm(virtv1.VirtualMachineStatusRunning), vmi: vmi(virtv1.Running),
			want: family.Observation{Reason: v1alpha1.ReasonVMRunning}, msg: "Running on infra node infra-1: the guest has not joined yet"},
		{name: "running, vmi not readable", vm: vm(virtv1.VirtualMachineStatusRunning),
			want: family.Observation{Reason: v1alpha1.ReasonVMRunning}, msg: "Running: the guest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := observe(key, tc.vm, tc.vmi)
			msg := got.Message
			got.Message = ""
			if got != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("observe() = %+v %q\nwant %+v with %q", got, msg, tc.want, tc.msg)
			}
		})
	}
}
