// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// vmiController plays everything that runs a VMI on the infra cluster: virt-controller's
// VMI controller (the launcher pod, the VMI's phase and conditions up to Scheduled), the
// kube-scheduler and kubelet for that pod (simulated: no pod object is created), and
// virt-handler (the domain: Scheduled to Running, powering the guest on and off).
type vmiController struct {
	client   client.Client
	recorder record.EventRecorder
	cfg      Config

	mu sync.Mutex
	// launchers are the simulated virt-launcher pods that have a node, by VMI UID: what the
	// scheduler has assumed, so that two VMIs are never placed on the same room.
	launchers map[types.UID]*launcher
}

type launcher struct {
	node     string
	podUID   types.UID
	requests corev1.ResourceList
	boundAt  time.Time
}

// vmiInputs is what a VMI's next status is decided from.
type vmiInputs struct {
	// missingVolume names the first DataVolume or PVC volume whose claim does not exist.
	missingVolume string
	// volumesReady: every DataVolume the VMI uses is populated.
	volumesReady bool
	// images are the images the launcher pulls (its containerDisks).
	images []string
	// userData is the cloud-init user data, or nil when its Secret does not exist.
	userData []byte
	// secretMissing names a cloud-init Secret that does not exist: the kubelet cannot mount
	// it and the launcher never starts.
	secretMissing string
	guest         Guest
	persistent    bool
	// nodeImage: the root disk's image has the node software (GuestBootsNode).
	nodeImage bool
}

func (c *vmiController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vmi := &virtv1.VirtualMachineInstance{}
	if err := c.client.Get(ctx, req.NamespacedName, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if vmi.DeletionTimestamp != nil {
		return reconcile.Result{}, c.shutDown(ctx, vmi)
	}
	if vmi.IsFinal() {
		c.release(vmi.UID)
		return reconcile.Result{}, c.removeFinalizer(ctx, vmi)
	}
	if !controllerutil.ContainsFinalizer(vmi, virtv1.VirtualMachineInstanceFinalizer) {
		controllerutil.AddFinalizer(vmi, virtv1.VirtualMachineInstanceFinalizer)
		if err := c.client.Update(ctx, vmi); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the vmi finalizer: %w", err)
		}
	}
	in, err := c.gather(ctx, vmi)
	if err != nil {
		return reconcile.Result{}, err
	}

	now := c.cfg.Clock.Now()
	next := vmi.DeepCopy()
	requeue := c.step(ctx, next, in, now)
	if next.Status.Phase != vmi.Status.Phase {
		next.Status.PhaseTransitionTimestamps = append(next.Status.PhaseTransitionTimestamps,
			virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: next.Status.Phase, PhaseTransitionTimestamp: metav1.NewTime(now)})
	}
	if next.Status.Phase == virtv1.Running {
		// virt-handler starts the domain; on a restarted controller, it finds it running.
		if err := c.cfg.Machines.PowerOn(ctx, c.machine(next, in)); err != nil {
			return reconcile.Result{}, fmt.Errorf("starting the domain of %s: %w", req.NamespacedName, err)
		}
	}
	if !equality.Semantic.DeepEqual(vmi.Status, next.Status) || !equality.Semantic.DeepEqual(vmi.Labels, next.Labels) {
		if err := c.client.Update(ctx, next); err != nil {
			return reconcile.Result{}, fmt.Errorf("updating vmi %s: %w", req.NamespacedName, err)
		}
		if next.Status.Phase == virtv1.Scheduling && vmi.Status.Phase != virtv1.Scheduling {
			c.recorder.Eventf(next, corev1.EventTypeNormal, reasonSuccessfulCreate, "Created virtual machine pod virt-launcher-%s", next.Name)
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// step moves the VMI one phase on when its time has come; it returns when to look again.
func (c *vmiController) step(ctx context.Context, vmi *virtv1.VirtualMachineInstance, in vmiInputs, now time.Time) time.Duration {
	t := c.cfg.Timings
	st := &vmi.Status
	switch st.Phase {
	case virtv1.VmPhaseUnset, virtv1.Pending:
		setReady(vmi, corev1.ConditionFalse, virtv1.PodNotExistsReason, messageLauncherNotThere, now)
		if in.missingVolume != "" {
			// areDataVolumesReady's informal sync error, and the PodScheduled condition
			// updateStatus adds for it.
			msg := fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, in.missingVolume)
			st.Phase = virtv1.Pending
			setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
				Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}, now)
			checkFailure(vmi, &syncError{reason: reasonFailedPvcNotFound, message: msg}, now)
			return t.Retry
		}
		removeVMICondition(vmi, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		checkFailure(vmi, nil, now)
		if !in.volumesReady {
			st.Phase = virtv1.Pending
			return t.Retry
		}
		if st.Phase == virtv1.VmPhaseUnset {
			// The launcher pod is created; the next look finds it.
			st.Phase = virtv1.Pending
			return time.Millisecond
		}
		st.Phase = virtv1.Scheduling
		return t.Schedule
	case virtv1.Scheduling:
		setReady(vmi, corev1.ConditionFalse, virtv1.GuestNotRunningReason, messageGuestNotRunning, now)
		l := c.launcherOf(vmi)
		if l == nil {
			if left := since(vmi, virtv1.Scheduling, now) - t.Schedule; left < 0 {
				return -left
			}
			var msg string
			if l, msg = c.scheduleLauncher(ctx, vmi, now); l == nil {
				setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
					Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}, now)
				return t.Retry
			}
		}
		removeVMICondition(vmi, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		st.ActivePods = map[types.UID]string{l.podUID: l.node}
		for _, image := range in.images {
			if _, ok := c.cfg.guest(image); !ok {
				reason, msg, next := imagePullState(image, now.Sub(l.boundAt), t.ImagePullBackOff)
				checkFailure(vmi, &syncError{reason: reason, message: msg}, now)
				return next
			}
		}
		checkFailure(vmi, nil, now)
		if in.secretMissing != "" {
			// The kubelet cannot mount the Secret: the pod stays ContainerCreating.
			return t.Retry
		}
		if left := now.Sub(l.boundAt) - t.Start; left < 0 {
			return -left
		}
		st.Phase = virtv1.Scheduled
		st.NodeName = l.node
		if vmi.Labels == nil {
			vmi.Labels = map[string]string{}
		}
		vmi.Labels[virtv1.NodeNameLabel] = l.node
		qos := corev1.PodQOSBurstable
		st.QOSClass = &qos
		st.Interfaces = c.interfaces(vmi)
		return t.Boot
	case virtv1.Scheduled:
		setReady(vmi, corev1.ConditionFalse, virtv1.GuestNotRunningReason, messageGuestNotRunning, now)
		if left := since(vmi, virtv1.Scheduled, now) - t.Boot; left < 0 {
			return -left
		}
		if in.guest == GuestCrashes {
			// The launcher dies before the domain runs; virt-controller sees the pod gone.
			st.Phase = virtv1.Failed
			setReady(vmi, corev1.ConditionFalse, virtv1.PodTerminatingReason, messageLauncherStopping, now)
			return 0
		}
		st.Phase = virtv1.Running
		setReady(vmi, corev1.ConditionTrue, "", "", now)
		return 0
	}
	return 0
}

// imagePullState is the kubelet's view of an image that does not exist, elapsed after the
// pod got its node: each pull fails (ErrImagePull), then the kubelet backs off
// (ImagePullBackOff) until the next pull.
func imagePullState(image string, elapsed, backoff time.Duration) (reason, message string, next time.Duration) {
	pullErr := fmt.Sprintf("rpc error: code = NotFound desc = failed to pull and unpack image %q: failed to resolve reference %q: %s: not found",
		fullImageName(image), fullImageName(image), fullImageName(image))
	into := elapsed % backoff
	if into < backoff/4 {
		return reasonErrImagePull, pullErr, backoff/4 - into
	}
	return reasonImagePullBackOff, fmt.Sprintf("Back-off pulling image %q: ErrImagePull: %s", withDefaultTag(image), pullErr), backoff - into
}

// withDefaultTag is the kubelet's applyDefaultImageTag: :latest for an image without tag or
// digest.
func withDefaultTag(image string) string {
	last := image[strings.LastIndex(image, "/")+1:]
	if strings.ContainsAny(last, ":@") {
		return image
	}
	return image + ":latest"
}

// fullImageName is the reference containerd resolves: docker.io and library/ for short
// names, :latest without a tag.
func fullImageName(image string) string {
	name := image
	first, _, hasSlash := strings.Cut(name, "/")
	if !hasSlash || !strings.ContainsAny(first, ".:") && first != "localhost" {
		if !hasSlash {
			name = "library/" + name
		}
		name = "docker.io/" + name
	}
	return withDefaultTag(name)
}

// scheduleLauncher places the VMI's launcher pod on an infra node, or returns the
// scheduler's message.
func (c *vmiController) scheduleLauncher(ctx context.Context, vmi *virtv1.VirtualMachineInstance, now time.Time) (*launcher, string) {
	pod := launcherPod(vmi, c.cfg.CPUAllocationRatio, c.cfg.MemoryOverhead)
	used, err := c.usage(ctx)
	if err != nil {
		return nil, err.Error()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, l := range c.launchers {
		if uid != vmi.UID {
			used[l.node] = addResources(used[l.node], l.requests)
		}
	}
	node, msg := schedule(pod, c.cfg.Nodes, used)
	if node == "" {
		return nil, msg
	}
	l := &launcher{node: node, podUID: uuid.NewUUID(), requests: podRequests(pod), boundAt: now}
	c.launchers[vmi.UID] = l
	return l, ""
}

// usage is what the launchers of VMIs this controller did not place itself (before a
// restart) hold on each node: those with an active pod that are not final.
func (c *vmiController) usage(ctx context.Context) (map[string]corev1.ResourceList, error) {
	list := &virtv1.VirtualMachineInstanceList{}
	var opts []client.ListOption
	if c.cfg.Namespace != "" {
		opts = append(opts, client.InNamespace(c.cfg.Namespace))
	}
	if err := c.client.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing vmis: %w", err)
	}
	used := map[string]corev1.ResourceList{}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range list.Items {
		vmi := &list.Items[i]
		if vmi.IsFinal() || c.launchers[vmi.UID] != nil {
			continue
		}
		for _, node := range vmi.Status.ActivePods {
			used[node] = addResources(used[node], podRequests(launcherPod(vmi, c.cfg.CPUAllocationRatio, c.cfg.MemoryOverhead)))
		}
	}
	return used, nil
}

// launcherOf is the VMI's launcher with a node: the one this controller placed, or the one
// its status records (placed before a restart, and adopted now).
func (c *vmiController) launcherOf(vmi *virtv1.VirtualMachineInstance) *launcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.launchers[vmi.UID]; l != nil {
		return l
	}
	for podUID, node := range vmi.Status.ActivePods {
		l := &launcher{node: node, podUID: podUID, requests: podRequests(launcherPod(vmi, c.cfg.CPUAllocationRatio, c.cfg.MemoryOverhead)), boundAt: c.cfg.Clock.Now()}
		c.launchers[vmi.UID] = l
		return l
	}
	return nil
}

func (c *vmiController) release(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.launchers, uid)
}

// shutDown is virt-handler stopping a deleted VMI's domain and virt-controller letting the
// VMI go: the guest is powered off, the phase recorded, the launcher's room released.
func (c *vmiController) shutDown(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	key := types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name}
	wipe := !persistentDisk(vmi) || c.ownerGone(ctx, vmi)
	if err := c.cfg.Machines.PowerOff(ctx, key, wipe); err != nil {
		return fmt.Errorf("stopping the domain of %s: %w", key, err)
	}
	if !vmi.IsFinal() {
		now := c.cfg.Clock.Now()
		next := vmi.DeepCopy()
		next.Status.Phase = virtv1.Failed
		if vmi.IsRunning() {
			next.Status.Phase = virtv1.Succeeded
		}
		next.Status.PhaseTransitionTimestamps = append(next.Status.PhaseTransitionTimestamps,
			virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: next.Status.Phase, PhaseTransitionTimestamp: metav1.NewTime(now)})
		setReady(next, corev1.ConditionFalse, virtv1.PodTerminatingReason, messageLauncherStopping, now)
		if err := c.client.Update(ctx, next); err != nil {
			return fmt.Errorf("recording the shutdown of %s: %w", key, err)
		}
		vmi = next
	}
	c.release(vmi.UID)
	return c.removeFinalizer(ctx, vmi)
}

func (c *vmiController) removeFinalizer(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	if !controllerutil.ContainsFinalizer(vmi, virtv1.VirtualMachineInstanceFinalizer) {
		return nil
	}
	patch := client.MergeFrom(vmi.DeepCopy())
	controllerutil.RemoveFinalizer(vmi, virtv1.VirtualMachineInstanceFinalizer)
	if err := c.client.Patch(ctx, vmi, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer of vmi %s: %w", vmi.Name, err)
	}
	return nil
}

// ownerGone: the VM that owns the VMI is deleted or being deleted, and its DataVolumes with
// it.
func (c *vmiController) ownerGone(ctx context.Context, vmi *virtv1.VirtualMachineInstance) bool {
	ref := metav1.GetControllerOf(vmi)
	if ref == nil {
		return true
	}
	vm := &virtv1.VirtualMachine{}
	err := c.client.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: ref.Name}, vm)
	return apierrors.IsNotFound(err) || err == nil && (vm.UID != ref.UID || vm.DeletionTimestamp != nil)
}

func persistentDisk(vmi *virtv1.VirtualMachineInstance) bool {
	persistent := false
	for _, v := range vmi.Spec.Volumes {
		switch {
		case v.ContainerDisk != nil:
			return false
		case v.DataVolume != nil || v.PersistentVolumeClaim != nil:
			persistent = true
		}
	}
	return persistent
}

// gather reads what the VMI depends on: its volumes' DataVolumes, its images and its
// cloud-init Secret.
func (c *vmiController) gather(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (vmiInputs, error) {
	in := vmiInputs{volumesReady: true, guest: GuestBoots, persistent: persistentDisk(vmi)}
	worst := func(g Guest) {
		if g == GuestCrashes || g == GuestNeverJoins && in.guest == GuestBoots {
			in.guest = g
		}
		if g == GuestBootsNode {
			in.nodeImage = true
		}
	}
	for _, v := range vmi.Spec.Volumes {
		switch {
		case v.ContainerDisk != nil:
			in.images = append(in.images, v.ContainerDisk.Image)
			if g, ok := c.cfg.guest(v.ContainerDisk.Image); ok {
				worst(g)
			}
		case v.DataVolume != nil || v.PersistentVolumeClaim != nil:
			name := ""
			if v.DataVolume != nil {
				name = v.DataVolume.Name
			} else {
				name = v.PersistentVolumeClaim.ClaimName
			}
			// A DataVolume's claim exists once CDI created it; claims are not simulated
			// apart from their DataVolumes.
			dv := &cdiv1.DataVolume{}
			err := c.client.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: name}, dv)
			if apierrors.IsNotFound(err) || err == nil && dvConditionStatus(dv, cdiv1.DataVolumeBound) != corev1.ConditionTrue {
				if in.missingVolume == "" && apierrors.IsNotFound(err) {
					in.missingVolume = name
				}
				in.volumesReady = false
				continue
			}
			if err != nil {
				return in, err
			}
			if dv.Status.Phase != cdiv1.Succeeded {
				in.volumesReady = false
			}
			if img, ok := registryImage(dv); ok {
				if g, ok := c.cfg.guest(img); ok {
					worst(g)
				}
			}
		case v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil:
			data, missing, err := c.userData(ctx, vmi.Namespace, v)
			if err != nil {
				return in, err
			}
			in.userData, in.secretMissing = data, missing
		}
	}
	return in, nil
}

// userData is the cloud-init user data of a volume: inline, or the userdata (or userData)
// key of its Secret.
func (c *vmiController) userData(ctx context.Context, namespace string, v virtv1.Volume) ([]byte, string, error) {
	var inline, inline64 string
	var ref *corev1.LocalObjectReference
	if src := v.CloudInitNoCloud; src != nil {
		inline, inline64, ref = src.UserData, src.UserDataBase64, src.UserDataSecretRef
	} else if src := v.CloudInitConfigDrive; src != nil {
		inline, inline64, ref = src.UserData, src.UserDataBase64, src.UserDataSecretRef
	}
	switch {
	case ref != nil:
		secret := &corev1.Secret{}
		err := c.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, secret)
		if apierrors.IsNotFound(err) {
			return nil, ref.Name, nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("reading cloud-init secret %s/%s: %w", namespace, ref.Name, err)
		}
		for _, key := range []string{"userdata", "userData"} {
			if data, ok := secret.Data[key]; ok {
				return data, "", nil
			}
		}
		return []byte{}, "", nil
	case inline64 != "":
		data, err := decodeBase64(inline64)
		return data, "", err
	default:
		return []byte(inline), "", nil
	}
}

// machine is the guest of a running VMI.
func (c *vmiController) machine(vmi *virtv1.VirtualMachineInstance, in vmiInputs) Machine {
	domain := vmi.Spec.Domain
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(vCPUs(domain.CPU), resource.DecimalSI),
		corev1.ResourceMemory: guestMemory(domain),
	}
	if n := len(domain.Devices.GPUs); n > 0 {
		capacity[c.cfg.GuestGPUResource] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	userData := in.userData
	if userData == nil {
		userData = []byte{}
	}
	return Machine{
		VMI:      types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name},
		UserData: userData, Capacity: capacity,
		NeverJoin: in.guest == GuestNeverJoins, PersistentDisk: in.persistent, NodeImage: in.nodeImage,
	}
}

// interfaces are the VMI's interfaces on the pod network, with an address from the pod
// CIDR (status only: nothing listens there).
func (c *vmiController) interfaces(vmi *virtv1.VirtualMachineInstance) []virtv1.VirtualMachineInstanceNetworkInterface {
	var out []virtv1.VirtualMachineInstanceNetworkInterface
	for _, n := range vmi.Spec.Networks {
		iface := virtv1.VirtualMachineInstanceNetworkInterface{Name: n.Name, InfoSource: "domain"}
		if n.Pod != nil {
			ip := podIP(c.cfg.PodCIDR, vmi.UID)
			iface.IP, iface.IPs, iface.PodInterfaceName = ip, []string{ip}, "eth0"
		}
		out = append(out, iface)
	}
	return out
}

// podIP derives a stable address inside cidr from uid.
func podIP(cidr netip.Prefix, uid types.UID) string {
	h := fnv.New32a()
	h.Write([]byte(uid))
	addr := cidr.Masked().Addr().As4()
	base := binary.BigEndian.Uint32(addr[:])
	hostBits := 32 - cidr.Bits()
	offset := h.Sum32()
	if hostBits < 32 {
		offset &= 1<<hostBits - 1
	}
	if offset == 0 {
		offset = 1
	}
	var out [4]byte
	binary.BigEndian.PutUint32(out[:], base|offset)
	return netip.AddrFrom4(out).String()
}

// since is how long the VMI has been in phase.
func since(vmi *virtv1.VirtualMachineInstance, phase virtv1.VirtualMachineInstancePhase, now time.Time) time.Duration {
	ts := vmi.Status.PhaseTransitionTimestamps
	for i := len(ts) - 1; i >= 0; i-- {
		if ts[i].Phase == phase {
			return now.Sub(ts[i].PhaseTransitionTimestamp.Time)
		}
	}
	return 0
}

// setReady sets the VMI's Ready condition (syncReadyConditionFromPod).
func setReady(vmi *virtv1.VirtualMachineInstance, status corev1.ConditionStatus, reason, message string, now time.Time) {
	setVMICondition(vmi, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceReady, Status: status, Reason: reason, Message: message}, now)
}

// checkFailure is the VMI condition manager's CheckFailure: a sync error becomes
// Synchronized=False with its reason and message; none removes it.
func checkFailure(vmi *virtv1.VirtualMachineInstance, err *syncError, now time.Time) {
	if err == nil {
		removeVMICondition(vmi, virtv1.VirtualMachineInstanceSynchronized)
		return
	}
	if hasVMICondition(vmi, virtv1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, err.reason) {
		c := vmiCondition(vmi, virtv1.VirtualMachineInstanceSynchronized)
		c.Message = err.message
		return
	}
	removeVMICondition(vmi, virtv1.VirtualMachineInstanceSynchronized)
	vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
		Type: virtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse,
		Reason: err.reason, Message: err.message, LastTransitionTime: metav1.NewTime(now),
	})
}

// setVMICondition replaces or adds c; the transition time changes with the status only.
func setVMICondition(vmi *virtv1.VirtualMachineInstance, c virtv1.VirtualMachineInstanceCondition, now time.Time) {
	if old := vmiCondition(vmi, c.Type); old != nil {
		c.LastTransitionTime, c.LastProbeTime = old.LastTransitionTime, old.LastProbeTime
		if old.Status != c.Status {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		*old = c
		return
	}
	c.LastTransitionTime = metav1.NewTime(now)
	vmi.Status.Conditions = append(vmi.Status.Conditions, c)
}

func removeVMICondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) {
	out := vmi.Status.Conditions[:0]
	for _, c := range vmi.Status.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	vmi.Status.Conditions = out
}
