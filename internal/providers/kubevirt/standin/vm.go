// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// vmController is virt-controller's VirtualMachine controller: it keeps a VMI for each VM
// that should run, creates the VM's DataVolumes from its templates, and mirrors the VMI on
// the VM's status.
type vmController struct {
	client   client.Client
	recorder record.EventRecorder
	cfg      Config
	rnd      func(int) int
}

func (c *vmController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vm := &virtv1.VirtualMachine{}
	if err := c.client.Get(ctx, req.NamespacedName, vm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	vmi, err := c.ownedVMI(ctx, vm)
	if err != nil {
		return reconcile.Result{}, err
	}
	dvs, err := c.dataVolumes(ctx, vm)
	if err != nil {
		return reconcile.Result{}, err
	}
	orig := vm.Status.DeepCopy()
	o := vmObservation{vm: vm, vmi: vmi, dataVolumes: dvs, now: c.cfg.Clock.Now()}
	var requeue time.Duration

	if vm.DeletionTimestamp != nil {
		// Terminating, recorded while the VMI goes.
		o.stopExpected = vmi != nil
		if status := vmStatus(o, c.cfg.Timings, c.rnd); vmi != nil && !equality.Semantic.DeepEqual(*orig, status) {
			vm.Status = status
			if err := c.client.Status().Update(ctx, vm); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return reconcile.Result{}, fmt.Errorf("updating the vm status: %w", err)
			}
		}
		return c.finalize(ctx, vm, vmi)
	}
	if !controllerutil.ContainsFinalizer(vm, virtv1.VirtualMachineControllerFinalizer) {
		patch := client.MergeFrom(vm.DeepCopy())
		controllerutil.AddFinalizer(vm, virtv1.VirtualMachineControllerFinalizer)
		if err := c.client.Patch(ctx, vm, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the vm finalizer: %w", err)
		}
	}

	// The start-failure record must see a failed VMI before the restart deletes it.
	status := vmStatus(o, c.cfg.Timings, c.rnd)
	o.vm.Status.StartFailure = status.StartFailure
	runStrategy, err := vm.RunStrategy()
	if err != nil {
		o.syncErr = &syncError{reason: reasonFailedCreate, message: err.Error()}
	} else if requeue, err = c.syncRunStrategy(ctx, &o, runStrategy); err != nil {
		o.syncErr = &syncError{reason: reasonFailedCreate, message: err.Error()}
	}

	status = vmStatus(o, c.cfg.Timings, c.rnd)
	if !equality.Semantic.DeepEqual(*orig, status) {
		vm.Status = status
		if err := c.client.Status().Update(ctx, vm); err != nil {
			return reconcile.Result{}, fmt.Errorf("updating the vm status: %w", err)
		}
	}
	// With its status recorded on the VM, a final VMI may go (updateStatus's finalizer
	// removal).
	if vmi != nil && vmi.IsFinal() {
		if err := c.removeVMIFinalizer(ctx, vmi); err != nil {
			return reconcile.Result{}, err
		}
	}
	if o.syncErr != nil {
		requeue = c.cfg.Timings.Retry
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// syncRunStrategy starts or stops the VMI as the run strategy asks; it returns how long to
// wait before looking again (a start-failure back-off).
func (c *vmController) syncRunStrategy(ctx context.Context, o *vmObservation, rs virtv1.VirtualMachineRunStrategy) (time.Duration, error) {
	vm, vmi := o.vm, o.vmi
	switch rs {
	case virtv1.RunStrategyAlways, virtv1.RunStrategyRerunOnFailure, virtv1.RunStrategyOnce:
		if vmi != nil {
			restart := vmi.IsFinal() && vmi.DeletionTimestamp == nil &&
				(rs == virtv1.RunStrategyAlways || rs == virtv1.RunStrategyRerunOnFailure && vmi.Status.Phase == virtv1.Failed)
			if restart {
				return 0, c.stopVMI(ctx, o)
			}
			return 0, nil
		}
		if left := backoffLeft(vm, o.now); left > 0 {
			return left, nil
		}
		return 0, c.startVMI(ctx, o)
	case virtv1.RunStrategyHalted:
		if vmi != nil && vmi.DeletionTimestamp == nil {
			return 0, c.stopVMI(ctx, o)
		}
	}
	// Manual (and WaitAsReceiver): only virtctl's start and stop requests act; none are
	// simulated.
	return 0, nil
}

// startVMI creates the VM's DataVolumes and, once they are populated, its VMI
// (handleDataVolumes, SetupVMIFromVM).
func (c *vmController) startVMI(ctx context.Context, o *vmObservation) error {
	vm := o.vm
	ready := true
	for _, tmpl := range vm.Spec.DataVolumeTemplates {
		dv := o.dataVolumes[tmpl.Name]
		if dv == nil {
			ready = false
			dv = &cdiv1.DataVolume{
				ObjectMeta: metav1.ObjectMeta{
					Name: tmpl.Name, Namespace: vm.Namespace,
					Labels: maps.Clone(tmpl.Labels), Annotations: maps.Clone(tmpl.Annotations),
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
				},
				Spec: *tmpl.Spec.DeepCopy(),
			}
			switch err := c.client.Create(ctx, dv); {
			case apierrors.IsAlreadyExists(err):
				// Created by an earlier reconcile that the cache has not shown yet.
			case err != nil:
				c.recorder.Eventf(vm, corev1.EventTypeWarning, "FailedDataVolumeCreate", "Error creating DataVolume %s: %v", dv.Name, err)
				return fmt.Errorf("failed to create DataVolume: %w", err)
			default:
				c.recorder.Eventf(vm, corev1.EventTypeNormal, reasonDataVolumeCreated, "Created DataVolume %s", dv.Name)
			}
			continue
		}
		switch dv.Status.Phase {
		case cdiv1.Succeeded, cdiv1.WaitForFirstConsumer, cdiv1.PendingPopulation:
		case cdiv1.Failed:
			c.recorder.Eventf(vm, corev1.EventTypeWarning, reasonDataVolumeImportKO, "DataVolume %s failed to import disk image", dv.Name)
			ready = false
		default:
			ready = false
		}
	}
	if !ready {
		return nil
	}

	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: *vm.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *vm.Spec.Template.Spec.DeepCopy(),
	}
	vmi.Name, vmi.GenerateName, vmi.Namespace = vm.Name, "", vm.Namespace
	vmi.Labels = maps.Clone(vm.Spec.Template.ObjectMeta.Labels)
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[virtv1.VirtualMachineGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	vmi.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}
	vmi.Finalizers = append(vmi.Finalizers, virtv1.VirtualMachineControllerFinalizer)
	switch err := c.client.Create(ctx, vmi); {
	case apierrors.IsAlreadyExists(err):
		// Created by an earlier reconcile that the cache has not shown yet (what
		// virt-controller's expectations are for).
		o.startExpected = true
		return nil
	case err != nil:
		c.recorder.Eventf(vm, corev1.EventTypeWarning, "FailedCreate", "Error creating virtual machine instance: %v", err)
		return fmt.Errorf("failure while starting VMI: %w", err)
	}
	c.recorder.Eventf(vm, corev1.EventTypeNormal, reasonSuccessfulCreate, "Started the virtual machine by creating the new virtual machine instance %v", vmi.Name)
	o.startExpected = true
	return nil
}

func (c *vmController) stopVMI(ctx context.Context, o *vmObservation) error {
	vmi := o.vmi
	if err := c.client.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); err != nil && !apierrors.IsNotFound(err) {
		c.recorder.Eventf(o.vm, corev1.EventTypeWarning, "FailedDelete", "Error deleting virtual machine instance %s: %v", vmi.Name, err)
		return fmt.Errorf("failure while deleting the VMI: %w", err)
	}
	c.recorder.Eventf(o.vm, corev1.EventTypeNormal, reasonSuccessfulDelete, "Stopped the virtual machine by deleting the virtual machine instance %v", vmi.UID)
	o.stopExpected = true
	return nil
}

// finalize deletes a deleted VM's VMI and lets the VM go once the VMI is gone.
func (c *vmController) finalize(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) (reconcile.Result, error) {
	if vmi != nil {
		if vmi.DeletionTimestamp == nil {
			if err := c.client.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("deleting the vmi of a deleted vm: %w", err)
			}
		}
		if vmi.IsFinal() {
			if err := c.removeVMIFinalizer(ctx, vmi); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{RequeueAfter: c.cfg.Timings.Retry}, nil
	}
	if controllerutil.ContainsFinalizer(vm, virtv1.VirtualMachineControllerFinalizer) {
		patch := client.MergeFrom(vm.DeepCopy())
		controllerutil.RemoveFinalizer(vm, virtv1.VirtualMachineControllerFinalizer)
		if err := c.client.Patch(ctx, vm, patch); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, nil
}

func (c *vmController) removeVMIFinalizer(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	if !controllerutil.ContainsFinalizer(vmi, virtv1.VirtualMachineControllerFinalizer) {
		return nil
	}
	patch := client.MergeFrom(vmi.DeepCopy())
	controllerutil.RemoveFinalizer(vmi, virtv1.VirtualMachineControllerFinalizer)
	if err := c.client.Patch(ctx, vmi, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the vm finalizer of vmi %s: %w", vmi.Name, err)
	}
	return nil
}

// ownedVMI is the VM's VMI: the one of its name that the VM controls.
func (c *vmController) ownedVMI(ctx context.Context, vm *virtv1.VirtualMachine) (*virtv1.VirtualMachineInstance, error) {
	vmi := &virtv1.VirtualMachineInstance{}
	err := c.client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: vm.Name}, vmi)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ref := metav1.GetControllerOf(vmi); ref == nil || ref.UID != vm.UID {
		return nil, nil
	}
	return vmi, nil
}

// dataVolumes are the existing DataVolumes the VM's templates and volumes name.
func (c *vmController) dataVolumes(ctx context.Context, vm *virtv1.VirtualMachine) (map[string]*cdiv1.DataVolume, error) {
	names := map[string]bool{}
	for _, t := range vm.Spec.DataVolumeTemplates {
		names[t.Name] = true
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.DataVolume != nil {
			names[v.DataVolume.Name] = true
		}
	}
	dvs := map[string]*cdiv1.DataVolume{}
	for name := range names {
		dv := &cdiv1.DataVolume{}
		err := c.client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: name}, dv)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		dvs[name] = dv
	}
	return dvs, nil
}
