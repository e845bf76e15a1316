// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package standin is a simulated KubeVirt (virt-controller, virt-handler, the launcher pods'
// scheduling and kubelet) and CDI for an infra cluster whose API server holds KubeVirt's
// CRDs (package crds): test and local-environment machinery, never linked into the
// controller binary.
//
// What it does as KubeVirt v1.7.0 does (pkg/virt-controller/watch/vm/vm.go, .../vmi/
// lifecycle.go and datavolumes.go, pkg/controller/conditions.go):
//
//   - A VM with runStrategy Always (or running: true; RerunOnFailure, Once and Halted too)
//     gets a VMI of its name, owned by it, with the template's labels, annotations and spec,
//     the kubevirt.io/vm-generation annotation and the kubevirt.io/virtualMachineControllerFinalize
//     finalizer; the VM gets that finalizer too. Its DataVolume templates become DataVolumes
//     owned by the VM, and the VMI is created only once they are populated.
//   - The VMI walks Pending, Scheduling, Scheduled and Running with phaseTransitionTimestamps,
//     the Ready condition (PodNotExists, GuestNotRunning, then the pod's), PodScheduled=False
//     Unschedulable with the scheduler's message, Synchronized=False with ErrImagePull /
//     ImagePullBackOff / FailedPvcNotFound and the kubelet's or virt-controller's message,
//     activePods, nodeName and the kubevirt.io/nodeName label, interfaces and qosClass.
//   - The VM's status: created, ready, runStrategy, observed/desired generation, the Ready
//     condition from the VMI's (VMINotExists, VMIConditionMissing), every other VMI condition
//     mirrored, a Failure condition on a sync error, startFailure with KubeVirt's back-off
//     (base × failures², jittered, capped), and printableStatus by virt-controller's ordered
//     checks: Terminating, Stopping, Running, ErrorPvcNotFound, DataVolumeError,
//     ErrorUnschedulable, Provisioning, ErrImagePull, ImagePullBackOff, Starting,
//     CrashLoopBackOff, Stopped. (ErrorDataVolumeNotFound was removed in KubeVirt v0.57: a
//     missing DataVolume shows ErrorPvcNotFound.)
//   - Deleting a VM deletes its VMI; a deleted VMI's guest is powered off, its phase recorded
//     (Succeeded after running, else Failed) and its finalizers removed.
//
// What it fakes:
//
//   - No virt-launcher pod exists. The launcher's requests are computed as virt-controller's
//     template service does (vCPUs / cpuAllocationRatio, guest memory plus an overhead, one
//     of each GPU's and host device's deviceName; nodeSelector plus kubevirt.io/schedulable,
//     affinity, tolerations) and placed on configured infra nodes (Config.Nodes, which exist
//     only here) by the filters of kube-scheduler's default profile (NodeUnschedulable,
//     TaintToleration, NodeAffinity, NodeResourcesFit), with its FitError message; no
//     preemption victims are ever found.
//   - Images: Config.Images lists the images that exist and how a guest booted from each
//     behaves (boots and joins, crashes before the domain runs, boots but never joins).
//     Pulling a missing image fails as containerd and the kubelet report it, alternating
//     ErrImagePull and ImagePullBackOff.
//   - CDI: a DataVolume whose storage class exists (a real StorageClass object, or the
//     default one) is bound at once and imports in Timings.Import (ImportScheduled,
//     ImportInProgress with progress, Succeeded); no PVC or importer pod is created, so a
//     claim "exists" when its DataVolume does. A class that does not exist leaves it unbound
//     as CDI does (ErrClaimNotValid and phase unset without access modes, Pending with them),
//     and the VM Provisioning. A registry source whose image does not exist fails its
//     importer (Running=False, reason Error), which KubeVirt shows as DataVolumeError.
//   - The guest is a simulated machine (Machines; SimMachines runs internal/sim) booted
//     with exactly the user data of the cloud-init Secret (key userdata or userData) or the
//     inline user data; its capacity is the VM's vCPUs, guest memory and GPUs. A Secret that
//     does not exist keeps the VMI Scheduling (the kubelet cannot mount it).
//   - Timings come from Config.Timings; the API's timestamps have second precision, so a
//     step may come up to a second early.
//
// Not simulated: migrations, pauses, hotplug, instance types and preferences, PVCs and
// WaitForFirstConsumer binding, virtctl start/stop requests, the guest agent.
package standin
