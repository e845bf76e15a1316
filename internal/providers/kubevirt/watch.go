// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Observe reads the claim's VirtualMachine and its VMI on the infra cluster with the claim's
// credentials (s.Env) and says where the VM is (family.MachineWatcher). The VM is looked for
// where the claim's runs made it: with the parameters recorded at Create (claimParameters),
// so that an edited class does not make it look deleted. A VMI the credentials may not read
// is left out: the VM's status mirrors its conditions.
func (f *Family) Observe(ctx context.Context, s family.Scope, ff *v1alpha1.Fulfillment) (family.Observation, error) {
	c, params, err := f.infra.forParameters(s.Env, claimParameters(s.Class, ff))
	if err != nil {
		return family.Observation{}, err
	}
	key := types.NamespacedName{Namespace: params[paramNamespace], Name: ff.Spec.NodeName}
	vm := &virtv1.VirtualMachine{}
	switch err := c.Get(ctx, key, vm); {
	case apierrors.IsNotFound(err):
		return observe(key, nil, nil), nil
	case err != nil:
		return family.Observation{}, fmt.Errorf("reading virtualmachine %s: %w", key, err)
	}
	vmi := &virtv1.VirtualMachineInstance{}
	switch err := c.Get(ctx, key, vmi); {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		vmi = nil
	case err != nil:
		return family.Observation{}, fmt.Errorf("reading virtualmachineinstance %s: %w", key, err)
	}
	return observe(key, vm, vmi), nil
}

// observe decides where a VM is from what the infra cluster holds: the VM (nil: gone) and
// its VMI (nil: none yet, or not readable). The reason follows the VM's printableStatus, as
// `kubectl get vm` shows it, then the VMI's phase; the message is the VM's own words.
func observe(key types.NamespacedName, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) family.Observation {
	if vm == nil {
		return family.Observation{Gone: true, Message: fmt.Sprintf("virtualmachine %s is gone from the infra cluster", key)}
	}
	if vm.DeletionTimestamp != nil {
		return family.Observation{Gone: true, Message: fmt.Sprintf("virtualmachine %s is being deleted on the infra cluster", key)}
	}
	ps := vm.Status.PrintableStatus
	words := func(conds ...string) string {
		for _, t := range conds {
			if msg := conditionMessage(vm, vmi, t); msg != "" {
				return string(ps) + ": " + msg
			}
		}
		return string(ps)
	}
	switch ps {
	case virtv1.VirtualMachineStatusUnschedulable:
		return family.Observation{Reason: v1alpha1.ReasonVMUnschedulable, Message: words(string(corev1.PodScheduled)), CapacityFailure: true}
	case virtv1.VirtualMachineStatusErrImagePull, virtv1.VirtualMachineStatusImagePullBackOff:
		return family.Observation{Reason: v1alpha1.ReasonVMImagePullFailed, Message: words(string(virtv1.VirtualMachineInstanceSynchronized), string(virtv1.VirtualMachineFailure))}
	case virtv1.VirtualMachineStatusCrashLoopBackOff, virtv1.VirtualMachineStatusDataVolumeError, virtv1.VirtualMachineStatusPvcNotFound:
		return family.Observation{Reason: v1alpha1.ReasonVMStartFailed, Message: words(string(virtv1.VirtualMachineFailure),
			string(virtv1.VirtualMachineInstanceSynchronized), string(virtv1.VirtualMachineInstanceDataVolumesReady), string(virtv1.VirtualMachineReady))}
	case virtv1.VirtualMachineStatusProvisioning, virtv1.VirtualMachineStatusWaitingForVolumeBinding:
		return family.Observation{Reason: v1alpha1.ReasonVMStarting, Message: string(ps) + ": its disk is being provisioned"}
	}
	switch {
	case vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning || vmi != nil && vmi.Status.Phase == virtv1.Running:
		where := ""
		if vmi != nil && vmi.Status.NodeName != "" {
			where = " on infra node " + vmi.Status.NodeName
		}
		return family.Observation{Reason: v1alpha1.ReasonVMRunning, Message: "Running" + where + ": the guest has not joined yet"}
	case vmi != nil && vmi.Status.Phase == virtv1.Scheduled:
		return family.Observation{Reason: v1alpha1.ReasonVMStarting, Message: fmt.Sprintf("%s: VMI scheduled to %s, the guest is starting", nonEmpty(ps), vmi.Status.NodeName)}
	case vmi == nil:
		return family.Observation{Reason: v1alpha1.ReasonVMScheduling, Message: words(string(virtv1.VirtualMachineReady))}
	}
	phase := vmi.Status.Phase
	if phase == "" {
		phase = virtv1.Pending
	}
	return family.Observation{Reason: v1alpha1.ReasonVMScheduling, Message: fmt.Sprintf("%s: VMI %s, waiting for its launcher pod to be scheduled", nonEmpty(ps), phase)}
}

func nonEmpty(ps virtv1.VirtualMachinePrintableStatus) virtv1.VirtualMachinePrintableStatus {
	if ps == "" {
		return virtv1.VirtualMachineStatusStarting
	}
	return ps
}

// conditionMessage is the message of a condition of type t that is not True: the VMI's,
// else the VM's (which mirrors the VMI's).
func conditionMessage(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, t string) string {
	if vmi != nil {
		for _, c := range vmi.Status.Conditions {
			if string(c.Type) == t && c.Status != corev1.ConditionTrue && c.Message != "" {
				return c.Message
			}
		}
	}
	for _, c := range vm.Status.Conditions {
		if string(c.Type) == t && c.Message != "" && (c.Status != corev1.ConditionTrue || c.Type == virtv1.VirtualMachineFailure) {
			return c.Message
		}
	}
	return ""
}
