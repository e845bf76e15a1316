// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Reasons and messages virt-controller uses (kubevirt v1.7.0: pkg/virt-controller/watch/vm/
// vm.go, pkg/virt-controller/watch/vmi/lifecycle.go and datavolumes.go, pkg/controller/
// controller.go; the Ready reasons are in kubevirt.io/api core/v1 types.go).
const (
	reasonVMINotExists       = "VMINotExists"
	messageVMINotExists      = "VMI does not exist"
	reasonVMIConditionMiss   = "VMIConditionMissing"
	messageVMIConditionMiss  = "VMI is missing the Ready condition"
	reasonFailedCreate       = "FailedCreate"
	reasonSuccessfulCreate   = "SuccessfulCreate"
	reasonSuccessfulDelete   = "SuccessfulDelete"
	reasonFailedPvcNotFound  = "FailedPvcNotFound"
	reasonErrImagePull       = "ErrImagePull"
	reasonImagePullBackOff   = "ImagePullBackOff"
	reasonDataVolumeCreated  = "SuccessfulDataVolumeCreate"
	reasonDataVolumeImportKO = "FailedDataVolumeImport"
	messageLauncherNotThere  = "virt-launcher pod has not yet been scheduled"
	messageGuestNotRunning   = "Guest VM is not reported as running"
	messageLauncherStopping  = "virt-launcher pod is terminating"
)

// vmObservation is what the VM's status is decided from.
type vmObservation struct {
	vm  *virtv1.VirtualMachine
	vmi *virtv1.VirtualMachineInstance
	// dataVolumes are the existing DataVolumes the VM's volumes name, by name.
	dataVolumes map[string]*cdiv1.DataVolume
	// startExpected and stopExpected: the controller created, or deleted, the VMI in this
	// reconcile and has not seen the result yet (virt-controller's expectations).
	startExpected, stopExpected bool
	// syncErr is this reconcile's failure (reason and message), if any.
	syncErr *syncError
	now     time.Time
}

type syncError struct {
	reason, message string
}

func (e *syncError) Error() string { return e.message }

// vmStatus computes the VM's status the way virt-controller's updateStatus does: created,
// ready, the start-failure back-off, the conditions synced from the VMI, and the printable
// status.
func vmStatus(o vmObservation, t Timings, rnd func(int) int) virtv1.VirtualMachineStatus {
	st := *o.vm.Status.DeepCopy()
	vmi := o.vmi
	st.Created = vmi != nil
	st.Ready = vmi != nil && vmiConditionStatus(vmi, virtv1.VirtualMachineInstanceReady) == corev1.ConditionTrue
	runStrategy, _ := o.vm.RunStrategy()
	if st.RunStrategy != "" || st.Created {
		st.RunStrategy = runStrategy
	}
	if vmi != nil {
		if gen, err := strconv.ParseInt(vmi.Annotations[virtv1.VirtualMachineGenerationAnnotation], 10, 64); err == nil {
			st.ObservedGeneration = gen
			st.DesiredGeneration = o.vm.Generation
		}
	}
	st.StartFailure = startFailure(o.vm, vmi, st.StartFailure, runStrategy, o.now, t, rnd)
	st.Conditions = vmConditions(st.Conditions, vmi, o.syncErr, o.now)
	st.PrintableStatus = printableStatus(o, st.StartFailure, runStrategy)
	return st
}

// startFailure records a VMI that failed without ever running, with the back-off before the
// next start (virt-controller's syncStartFailureStatus and calculateStartBackoffTime).
func startFailure(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, prev *virtv1.VirtualMachineStartFailure, runStrategy virtv1.VirtualMachineRunStrategy, now time.Time, t Timings, rnd func(int) int) *virtv1.VirtualMachineStartFailure {
	restarts := runStrategy == virtv1.RunStrategyAlways || runStrategy == virtv1.RunStrategyRerunOnFailure || runStrategy == virtv1.RunStrategyOnce
	if wasRunning(vmi) || !restarts {
		return nil
	}
	if vmi == nil || !vmi.IsFinal() {
		return prev
	}
	if prev != nil && prev.LastFailedVMIUID == vmi.UID {
		return prev
	}
	count := 1
	if prev != nil {
		count = prev.ConsecutiveFailCount + 1
	}
	delay := t.CrashLoopBackOff * time.Duration(count*count)
	delay += time.Duration(rnd(int(delay/2) + 1))
	if delay > t.MaxCrashLoopBackOff {
		delay = t.MaxCrashLoopBackOff
	}
	retry := metav1.NewTime(now.Add(delay))
	return &virtv1.VirtualMachineStartFailure{LastFailedVMIUID: vmi.UID, RetryAfterTimestamp: &retry, ConsecutiveFailCount: count}
}

func wasRunning(vmi *virtv1.VirtualMachineInstance) bool {
	if vmi == nil {
		return false
	}
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		if ts.Phase == virtv1.Running {
			return true
		}
	}
	return false
}

// backoffLeft is how long the VM still waits before starting again.
func backoffLeft(vm *virtv1.VirtualMachine, now time.Time) time.Duration {
	sf := vm.Status.StartFailure
	if sf == nil || sf.RetryAfterTimestamp == nil {
		return 0
	}
	return max(sf.RetryAfterTimestamp.Sub(now), 0)
}

// vmConditions: Ready from the VMI's Ready condition, every other VMI condition copied,
// conditions the VMI no longer has removed, and Failure from this reconcile's error
// (syncConditions, syncReadyConditionFromVMI and processFailureCondition).
func vmConditions(prev []virtv1.VirtualMachineCondition, vmi *virtv1.VirtualMachineInstance, syncErr *syncError, now time.Time) []virtv1.VirtualMachineCondition {
	conds := append([]virtv1.VirtualMachineCondition(nil), prev...)
	ready := virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse}
	switch rc := vmiCondition(vmi, virtv1.VirtualMachineInstanceReady); {
	case vmi == nil:
		ready.Reason, ready.Message = reasonVMINotExists, messageVMINotExists
	case rc == nil:
		ready.Reason, ready.Message = reasonVMIConditionMiss, messageVMIConditionMiss
	default:
		ready.Status, ready.Reason, ready.Message = rc.Status, rc.Reason, rc.Message
	}
	conds = setVMCondition(conds, ready, now)
	if syncErr != nil {
		conds = setVMCondition(conds, virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: syncErr.reason, Message: syncErr.message}, now)
	} else {
		conds = removeVMCondition(conds, virtv1.VirtualMachineFailure)
	}
	if vmi == nil {
		return conds
	}
	notSynced := map[virtv1.VirtualMachineConditionType]bool{
		virtv1.VirtualMachineReady: true, virtv1.VirtualMachineFailure: true, virtv1.VirtualMachineRestartRequired: true,
	}
	onVMI := map[virtv1.VirtualMachineConditionType]bool{}
	for _, c := range vmi.Status.Conditions {
		t := virtv1.VirtualMachineConditionType(c.Type)
		if notSynced[t] {
			continue
		}
		onVMI[t] = true
		conds = setVMCondition(conds, virtv1.VirtualMachineCondition{
			Type: t, Status: c.Status, Reason: c.Reason, Message: c.Message,
			LastProbeTime: c.LastProbeTime, LastTransitionTime: c.LastTransitionTime,
		}, now)
	}
	out := conds[:0]
	for _, c := range conds {
		if notSynced[c.Type] || onVMI[c.Type] {
			out = append(out, c)
		}
	}
	return out
}

// setVMCondition replaces or adds c; the transition time stays while the status does.
func setVMCondition(conds []virtv1.VirtualMachineCondition, c virtv1.VirtualMachineCondition, now time.Time) []virtv1.VirtualMachineCondition {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = conds[i].LastTransitionTime
			if conds[i].Status != c.Status || c.LastTransitionTime.IsZero() {
				c.LastTransitionTime = metav1.NewTime(now)
			}
		}
		if c.LastProbeTime.IsZero() {
			c.LastProbeTime = conds[i].LastProbeTime
		}
		if !equality.Semantic.DeepEqual(conds[i], c) {
			conds[i] = c
		}
		return conds
	}
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = metav1.NewTime(now)
	}
	return append(conds, c)
}

func removeVMCondition(conds []virtv1.VirtualMachineCondition, t virtv1.VirtualMachineConditionType) []virtv1.VirtualMachineCondition {
	out := conds[:0]
	for _, c := range conds {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
}

// printableStatus is virt-controller's setPrintableStatus: the first status whose check
// holds, in its order (Migrating, Paused, WaitingForVolumeBinding and WaitingForReceiver
// cannot happen here: no migrations, pauses, PVCs or receivers are simulated).
func printableStatus(o vmObservation, sf *virtv1.VirtualMachineStartFailure, runStrategy virtv1.VirtualMachineRunStrategy) virtv1.VirtualMachinePrintableStatus {
	vm, vmi := o.vm, o.vmi
	final := vmi != nil && vmi.IsFinal()
	syncReason := ""
	if c := vmiCondition(vmi, virtv1.VirtualMachineInstanceSynchronized); c != nil && c.Status == corev1.ConditionFalse {
		syncReason = c.Reason
	}
	crashLoop := (vmi == nil || final) && !o.startExpected && sf != nil && sf.ConsecutiveFailCount > 0 &&
		(runStrategy == virtv1.RunStrategyAlways || runStrategy == virtv1.RunStrategyRerunOnFailure || runStrategy == virtv1.RunStrategyOnce)
	checks := []struct {
		status virtv1.VirtualMachinePrintableStatus
		holds  bool
	}{
		{virtv1.VirtualMachineStatusTerminating, vm.DeletionTimestamp != nil},
		{virtv1.VirtualMachineStatusStopping, vmi != nil && !final && (vmi.DeletionTimestamp != nil || o.stopExpected)},
		{virtv1.VirtualMachineStatusRunning, vmi != nil && vmi.IsRunning()},
		{virtv1.VirtualMachineStatusPvcNotFound, syncReason == reasonFailedPvcNotFound},
		{virtv1.VirtualMachineStatusDataVolumeError, dataVolumeError(vm, o.dataVolumes) != nil},
		{virtv1.VirtualMachineStatusUnschedulable, hasVMICondition(vmi, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), corev1.ConditionFalse, corev1.PodReasonUnschedulable)},
		{virtv1.VirtualMachineStatusProvisioning, dataVolumeProvisioning(vm, o.dataVolumes)},
		{virtv1.VirtualMachineStatusErrImagePull, syncReason == reasonErrImagePull},
		{virtv1.VirtualMachineStatusImagePullBackOff, syncReason == reasonImagePullBackOff},
		{virtv1.VirtualMachineStatusStarting, vmi == nil && o.startExpected || vmi != nil && (vmi.IsUnprocessed() || vmi.IsScheduling() || vmi.IsScheduled())},
		{virtv1.VirtualMachineStatusCrashLoopBackOff, crashLoop},
		{virtv1.VirtualMachineStatusStopped, vmi == nil && !o.startExpected || final},
	}
	for _, c := range checks {
		if c.holds {
			return c.status
		}
	}
	return virtv1.VirtualMachineStatusUnknown
}

// dataVolumeProvisioning: a DataVolume the VM uses is still being provisioned
// (storagetypes.HasDataVolumeProvisioning).
func dataVolumeProvisioning(vm *virtv1.VirtualMachine, dvs map[string]*cdiv1.DataVolume) bool {
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.DataVolume == nil {
			continue
		}
		dv := dvs[v.DataVolume.Name]
		if dv == nil || dv.Status.Phase == cdiv1.Succeeded || dv.Status.Phase == cdiv1.PendingPopulation {
			continue
		}
		if dvConditionStatus(dv, cdiv1.DataVolumeBound) == corev1.ConditionTrue || dv.Status.Phase != cdiv1.WaitForFirstConsumer {
			return true
		}
	}
	return false
}

// dataVolumeError: a DataVolume the VM uses failed, or its importer stopped on an error
// (storagetypes.HasDataVolumeErrors).
func dataVolumeError(vm *virtv1.VirtualMachine, dvs map[string]*cdiv1.DataVolume) error {
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.DataVolume == nil {
			continue
		}
		dv := dvs[v.DataVolume.Name]
		if dv == nil {
			continue
		}
		if dv.Status.Phase == cdiv1.Failed {
			return fmt.Errorf("DataVolume %s is in Failed phase", dv.Name)
		}
		for _, c := range dv.Status.Conditions {
			if c.Type == cdiv1.DataVolumeRunning && c.Status == corev1.ConditionFalse && (c.Reason == "Error" || c.Reason == "ImagePullFailed") {
				return fmt.Errorf("DataVolume %s importer has stopped running due to an error: %v", dv.Name, c.Message)
			}
		}
	}
	return nil
}

func vmiCondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	if vmi == nil {
		return nil
	}
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func vmiConditionStatus(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) corev1.ConditionStatus {
	if c := vmiCondition(vmi, t); c != nil {
		return c.Status
	}
	return ""
}

func hasVMICondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason string) bool {
	c := vmiCondition(vmi, t)
	return c != nil && c.Status == status && c.Reason == reason
}

func dvConditionStatus(dv *cdiv1.DataVolume, t cdiv1.DataVolumeConditionType) corev1.ConditionStatus {
	for _, c := range dv.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// defaultRand is the jitter of the start-failure back-off.
func defaultRand(n int) int {
	if n <= 0 {
		return 0
	}
	return rand.IntN(n)
}
