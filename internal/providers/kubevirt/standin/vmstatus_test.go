// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

func testVM(mutate ...func(*virtv1.VirtualMachine)) *virtv1.VirtualMachine {
	vm := &virtv1.VirtualMachine{}
	vm.Name, vm.Namespace, vm.Generation = "vm", "infra", 1
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways)
	vm.Spec.Template = &virtv1.VirtualMachineInstanceTemplateSpec{}
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "root"}}}}
	for _, m := range mutate {
		m(vm)
	}
	return vm
}

func testVMI(phase virtv1.VirtualMachineInstancePhase, conds ...virtv1.VirtualMachineInstanceCondition) *virtv1.VirtualMachineInstance {
	vmi := &virtv1.VirtualMachineInstance{}
	vmi.Name, vmi.UID = "vm", "uid-1"
	vmi.Annotations = map[string]string{virtv1.VirtualMachineGenerationAnnotation: "1"}
	vmi.Status.Phase = phase
	vmi.Status.Conditions = conds
	return vmi
}

func cond(t virtv1.VirtualMachineInstanceConditionType, s corev1.ConditionStatus, reason string) virtv1.VirtualMachineInstanceCondition {
	return virtv1.VirtualMachineInstanceCondition{Type: t, Status: s, Reason: reason, Message: reason + " message"}
}

func dv(phase cdiv1.DataVolumePhase, conds ...cdiv1.DataVolumeCondition) map[string]*cdiv1.DataVolume {
	d := &cdiv1.DataVolume{}
	d.Name = "root"
	d.Status.Phase = phase
	d.Status.Conditions = conds
	return map[string]*cdiv1.DataVolume{"root": d}
}

func TestPrintableStatus(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	deleting := metav1.NewTime(now)
	podScheduled := virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)
	for _, tc := range []struct {
		name string
		o    vmObservation
		want virtv1.VirtualMachinePrintableStatus
	}{
		{"no vmi yet, starting", vmObservation{vm: testVM(), startExpected: true}, virtv1.VirtualMachineStatusStarting},
		{"no vmi", vmObservation{vm: testVM()}, virtv1.VirtualMachineStatusStopped},
		{"vm deleted", vmObservation{vm: testVM(func(vm *virtv1.VirtualMachine) { vm.DeletionTimestamp = &deleting }), vmi: testVMI(virtv1.Running)}, virtv1.VirtualMachineStatusTerminating},
		{"vmi deleted", vmObservation{vm: testVM(), vmi: func() *virtv1.VirtualMachineInstance {
			v := testVMI(virtv1.Running)
			v.DeletionTimestamp = &deleting
			return v
		}()}, virtv1.VirtualMachineStatusStopping},
		{"pending", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Pending)}, virtv1.VirtualMachineStatusStarting},
		{"scheduling", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Scheduling)}, virtv1.VirtualMachineStatusStarting},
		{"unschedulable", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Scheduling, cond(podScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable))}, virtv1.VirtualMachineStatusUnschedulable},
		{"image pull", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Scheduling, cond(virtv1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, reasonErrImagePull))}, virtv1.VirtualMachineStatusErrImagePull},
		{"image pull back-off", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Scheduling, cond(virtv1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, reasonImagePullBackOff))}, virtv1.VirtualMachineStatusImagePullBackOff},
		{"claim missing", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Pending,
			cond(podScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable), cond(virtv1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, reasonFailedPvcNotFound))}, virtv1.VirtualMachineStatusPvcNotFound},
		{"scheduled", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Scheduled)}, virtv1.VirtualMachineStatusStarting},
		{"running", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Running, cond(virtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, ""))}, virtv1.VirtualMachineStatusRunning},
		{"data volume importing", vmObservation{vm: testVM(), dataVolumes: dv(cdiv1.ImportInProgress, cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionTrue})}, virtv1.VirtualMachineStatusProvisioning},
		{"data volume without storage class", vmObservation{vm: testVM(), dataVolumes: dv(cdiv1.PhaseUnset, cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionFalse, Reason: reasonNotFound})}, virtv1.VirtualMachineStatusProvisioning},
		{"data volume import error", vmObservation{vm: testVM(), dataVolumes: dv(cdiv1.ImportInProgress, cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: "Error"})}, virtv1.VirtualMachineStatusDataVolumeError},
		{"data volume waiting for its consumer", vmObservation{vm: testVM(), dataVolumes: dv(cdiv1.WaitForFirstConsumer)}, virtv1.VirtualMachineStatusStopped},
		{"failed before running", vmObservation{vm: testVM(), vmi: testVMI(virtv1.Failed)}, virtv1.VirtualMachineStatusCrashLoopBackOff},
		{"halted and stopped", vmObservation{vm: testVM(func(vm *virtv1.VirtualMachine) { vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted) }), vmi: testVMI(virtv1.Succeeded)}, virtv1.VirtualMachineStatusStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.now = now
			st := vmStatus(tc.o, Timings{}.withDefaults(), func(int) int { return 0 })
			if st.PrintableStatus != tc.want {
				t.Errorf("printableStatus = %s, want %s", st.PrintableStatus, tc.want)
			}
		})
	}
}

func TestVMStatusConditionsAndBackoff(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	timings := Timings{CrashLoopBackOff: 10 * time.Second, MaxCrashLoopBackOff: 300 * time.Second}.withDefaults()
	noJitter := func(int) int { return 0 }

	vm := testVM()
	vmi := testVMI(virtv1.Scheduling,
		cond(virtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, virtv1.GuestNotRunningReason),
		cond(virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), corev1.ConditionFalse, corev1.PodReasonUnschedulable))
	st := vmStatus(vmObservation{vm: vm, vmi: vmi, now: now}, timings, noJitter)
	if !st.Created || st.Ready || st.RunStrategy != virtv1.RunStrategyAlways || st.ObservedGeneration != 1 || st.DesiredGeneration != 1 {
		t.Errorf("status = %+v", st)
	}
	want := map[virtv1.VirtualMachineConditionType]string{
		virtv1.VirtualMachineReady:                              "False/" + virtv1.GuestNotRunningReason,
		virtv1.VirtualMachineConditionType(corev1.PodScheduled): "False/" + corev1.PodReasonUnschedulable,
	}
	if len(st.Conditions) != len(want) {
		t.Errorf("conditions = %+v", st.Conditions)
	}
	for _, c := range st.Conditions {
		if want[c.Type] != string(c.Status)+"/"+c.Reason || c.Message != c.Reason+" message" {
			t.Errorf("condition %s = %s/%s %q", c.Type, c.Status, c.Reason, c.Message)
		}
	}

	// The VMI is scheduled: PodScheduled goes from the VM too; Ready follows.
	vm.Status = st
	vmi = testVMI(virtv1.Running, cond(virtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, ""))
	st = vmStatus(vmObservation{vm: vm, vmi: vmi, now: now}, timings, noJitter)
	if len(st.Conditions) != 1 || st.Conditions[0].Type != virtv1.VirtualMachineReady || st.Conditions[0].Status != corev1.ConditionTrue || !st.Ready {
		t.Errorf("running: conditions = %+v ready %v", st.Conditions, st.Ready)
	}

	// Without a VMI: VMINotExists.
	st = vmStatus(vmObservation{vm: testVM(), now: now}, timings, noJitter)
	if c := st.Conditions[0]; c.Reason != reasonVMINotExists || c.Message != messageVMINotExists || st.Created {
		t.Errorf("no vmi: %+v", st)
	}

	// Start failures back off base × failures², and a VMI that ran resets them.
	vm = testVM()
	for i, wantDelay := range []time.Duration{10 * time.Second, 40 * time.Second, 90 * time.Second, 160 * time.Second, 250 * time.Second, 300 * time.Second} {
		failed := testVMI(virtv1.Failed)
		failed.UID = types.UID("uid-" + string(rune('a'+i)))
		st := vmStatus(vmObservation{vm: vm, vmi: failed, now: now}, timings, noJitter)
		sf := st.StartFailure
		if sf == nil || sf.ConsecutiveFailCount != i+1 || sf.RetryAfterTimestamp.Sub(now) != wantDelay || sf.LastFailedVMIUID != failed.UID {
			t.Fatalf("failure %d: %+v", i+1, sf)
		}
		if st.PrintableStatus != virtv1.VirtualMachineStatusCrashLoopBackOff {
			t.Errorf("failure %d: printable %s", i+1, st.PrintableStatus)
		}
		again := vmStatus(vmObservation{vm: &virtv1.VirtualMachine{ObjectMeta: vm.ObjectMeta, Spec: vm.Spec, Status: st}, vmi: failed, now: now.Add(time.Minute)}, timings, noJitter)
		if again.StartFailure.ConsecutiveFailCount != i+1 {
			t.Errorf("the same failed vmi counted twice")
		}
		vm.Status = st
	}
	if left := backoffLeft(vm, now.Add(100*time.Second)); left != 200*time.Second {
		t.Errorf("back-off left = %s", left)
	}
	ran := testVMI(virtv1.Running)
	ran.Status.PhaseTransitionTimestamps = []virtv1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: virtv1.Running}}
	if st := vmStatus(vmObservation{vm: vm, vmi: ran, now: now}, timings, noJitter); st.StartFailure != nil {
		t.Errorf("a vmi that ran keeps the start failures: %+v", st.StartFailure)
	}
}
