// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
)

// Annotations a pod may carry to tell the simulated machine how its containers behave, since
// it runs no processes. Without them a container of a pod whose restartPolicy is Always runs
// until the pod is deleted, and one of any other pod exits 0 as soon as it started.
const (
	// AnnotationRunFor is how long the containers of a pod whose restartPolicy is Never or
	// OnFailure run before they exit (a Go duration; default 0).
	AnnotationRunFor = "sim.fulfiller.sh/run-for"
	// AnnotationExitCode is the code they exit with (default 0); non-zero fails the pod.
	AnnotationExitCode = "sim.fulfiller.sh/exit-code"
	// AnnotationStopAfter is how long a container takes to exit after SIGTERM (a Go duration;
	// default 0): with its preStop hook, the time a deleted pod takes to terminate, never more
	// than its grace period.
	AnnotationStopAfter = "sim.fulfiller.sh/stop-after"
)

// podRecord is what the machine's kubelet knows of one pod besides the API server's copy.
type podRecord struct {
	// rejected: admission refused the pod (its terminal status is posted).
	rejected bool
	// started is when its containers started; zero until then.
	started time.Time
	// killed is when the kubelet saw the deletion and began stopping the containers; stopped
	// when they had all exited.
	killed, stopped time.Time
	// removed: the pod's terminal status is posted and the pod deleted for good.
	removed bool
	// timer wakes the pod's sync when its status is next due to change.
	timer *time.Timer
}

// podLoop runs the pods bound to one machine's Node as its kubelet would, as far as the API
// server can observe: admission against the Node's allocatable (OutOfcpu, OutOfpods, ...),
// Running with its probes' initial delays before Ready, readiness gates, containers that exit
// for pods that are not restarted, and termination within the grace period (the preStop hook
// counted in) followed by the final delete. One watch per machine; one goroutine syncs.
type podLoop struct {
	m     *machine
	store cache.Store

	mu      sync.Mutex
	records map[types.UID]*podRecord
	// queue holds the namespace/name keys of the pods to sync, each once.
	queue  []string
	queued map[string]bool
	wake   chan struct{}
	// now is the clock (a test may move it).
	now func() time.Time
}

func newPodLoop(m *machine) *podLoop {
	return &podLoop{m: m, records: map[types.UID]*podRecord{}, queued: map[string]bool{},
		wake: make(chan struct{}, 1), now: time.Now}
}

// run watches the Node's pods and syncs them until ctx ends.
func (l *podLoop) run(ctx context.Context) {
	pods := l.m.client.CoreV1().Pods(metav1.NamespaceAll)
	selector := fields.OneTermEqualSelector("spec.nodeName", l.m.nodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			l.enqueue(key)
		}
	}
	store, controller := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if pod, ok := obj.(*corev1.Pod); ok {
					l.forget(pod.UID)
				}
			},
		},
	})
	l.store = store
	go controller.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), controller.HasSynced) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			l.stopTimers()
			return
		case <-l.wake:
		}
		for {
			key, ok := l.next()
			if !ok {
				break
			}
			l.sync(ctx, key)
		}
	}
}

func (l *podLoop) enqueue(key string) {
	l.mu.Lock()
	if !l.queued[key] {
		l.queued[key] = true
		l.queue = append(l.queue, key)
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *podLoop) next() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) == 0 {
		return "", false
	}
	key := l.queue[0]
	l.queue = l.queue[1:]
	delete(l.queued, key)
	return key, true
}

func (l *podLoop) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.records[uid]; r != nil && r.timer != nil {
		r.timer.Stop()
	}
	delete(l.records, uid)
}

func (l *podLoop) stopTimers() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if r.timer != nil {
			r.timer.Stop()
		}
	}
}

// wakeAt syncs the pod again at t, instead of any earlier wake-up planned.
func (l *podLoop) wakeAt(pod *corev1.Pod, r *podRecord, t time.Time) {
	key := pod.Namespace + "/" + pod.Name
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timer = time.AfterFunc(max(t.Sub(l.now()), 0)+5*time.Millisecond, func() { l.enqueue(key) })
}

// sync brings one pod a step on: admit it, start it, stop it, or report what changed.
func (l *podLoop) sync(ctx context.Context, key string) {
	obj, ok, err := l.store.GetByKey(key)
	if err != nil || !ok {
		return
	}
	pod := obj.(*corev1.Pod)
	l.mu.Lock()
	r := l.records[pod.UID]
	if r == nil {
		r = &podRecord{}
		l.records[pod.UID] = r
	}
	l.mu.Unlock()
	if r.removed || r.rejected && pod.DeletionTimestamp == nil {
		return
	}
	now := l.now()
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	switch {
	case pod.DeletionTimestamp != nil:
		if r.started.IsZero() && !r.rejected {
			r.started = adoptStarted(pod) // a restarted machine stops what it kept running
		}
		if r.started.IsZero() || terminal {
			// Nothing runs (never started, exited, or refused): the kubelet removes the pod.
			l.remove(ctx, pod, r)
			return
		}
		if r.killed.IsZero() {
			r.killed = now
			grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 30)) * time.Second
			r.stopped = now.Add(min(stopDuration(pod), grace))
			l.m.log.printf("pod %s/%s: stopping its containers (grace period %s)", pod.Namespace, pod.Name, grace)
		}
		if now.Before(r.stopped) {
			l.wakeAt(pod, r, r.stopped)
			return
		}
		if err := l.post(ctx, pod, l.status(pod, r, now)); err != nil {
			l.retry(r, err, pod)
			return
		}
		l.remove(ctx, pod, r)
		return
	case terminal:
		return
	case r.started.IsZero():
		if started := adoptStarted(pod); !started.IsZero() {
			// The machine restarted: its containers kept running.
			r.started = started
		} else if reason, msg := l.admit(pod); reason != "" {
			r.rejected = true
			l.m.log.printf("pod %s/%s refused: %s", pod.Namespace, pod.Name, msg)
			status := pod.Status.DeepCopy()
			status.Phase, status.Reason, status.Message = corev1.PodFailed, reason, msg
			status.StartTime = ptr.To(metav1.NewTime(now))
			if err := l.post(ctx, pod, *status); err != nil {
				r.rejected = false
				l.retry(r, err, pod)
				return
			}
			l.event(ctx, pod, corev1.EventTypeWarning, reason, msg)
			return
		} else {
			r.started = now
		}
	}
	status := l.status(pod, r, now)
	if !statusEqual(pod.Status, status) {
		if err := l.post(ctx, pod, status); err != nil {
			l.retry(r, err, pod)
			return
		}
	}
	if next, ok := nextChange(pod, r.started, now); ok {
		l.wakeAt(pod, r, next)
	}
}

// retry syncs the pod again a second later, as the kubelet does after a failed status update.
func (l *podLoop) retry(r *podRecord, err error, pod *corev1.Pod) {
	if apierrors.IsNotFound(err) {
		return
	}
	l.m.log.printf("pod %s/%s: %v (retrying)", pod.Namespace, pod.Name, err)
	l.wakeAt(pod, r, l.now().Add(time.Second))
}

// remove deletes a pod whose containers are gone, as the kubelet does once a pod being deleted
// is terminal: at once, and only this incarnation of it.
func (l *podLoop) remove(ctx context.Context, pod *corev1.Pod, r *podRecord) {
	if pod.DeletionTimestamp == nil {
		return
	}
	err := l.m.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		l.retry(r, err, pod)
		return
	}
	r.removed = true
	if !r.killed.IsZero() {
		l.m.log.printf("pod %s/%s terminated after %s", pod.Namespace, pod.Name, r.stopped.Sub(r.killed).Round(time.Millisecond))
	}
}

// post patches the pod's status as the kubelet's status manager does, with the pod's UID as a
// precondition.
func (l *podLoop) post(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   status,
	})
	if err != nil {
		return err
	}
	_, err = l.m.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

func (l *podLoop) event(ctx context.Context, pod *corev1.Pod, typ, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: typ, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "kubelet", Host: l.m.nodeName},
	}
	if _, err := l.m.client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		l.m.log.printf("recording event %s on pod %s/%s: %v", reason, pod.Namespace, pod.Name, err)
	}
}

// admit is the kubelet's resource admission: the pod's requests must fit in the Node's
// allocatable next to the pods it runs already. It returns the kubelet's reason
// ("OutOf<resource>") and message when they do not.
func (l *podLoop) admit(pod *corev1.Pod) (string, string) {
	allocatable := l.m.allocatable(l.m.capacity(), l.now())
	used := corev1.ResourceList{}
	running := 0
	for _, obj := range l.store.List() {
		p := obj.(*corev1.Pod)
		if p.UID == pod.UID || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		l.mu.Lock()
		r := l.records[p.UID]
		admitted := r != nil && !r.started.IsZero() && !r.removed
		l.mu.Unlock()
		if !admitted {
			continue
		}
		running++
		for name, q := range podRequests(p) {
			add(used, name, q)
		}
	}
	if pods := allocatable[corev1.ResourcePods]; int64(running+1) > pods.Value() {
		return "OutOfpods", fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d", running, pods.Value())
	}
	requests := podRequests(pod)
	names := make([]string, 0, len(requests))
	for name := range requests {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, n := range names {
		name := corev1.ResourceName(n)
		want := requests[name]
		if want.IsZero() {
			continue
		}
		have, inUse := allocatable[name], used[name]
		free := have.DeepCopy()
		free.Sub(inUse)
		if want.Cmp(free) > 0 {
			return "OutOf" + n, fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
				n, quantityValue(name, want), quantityValue(name, inUse), quantityValue(name, have))
		}
	}
	return "", ""
}

// quantityValue is a quantity as the kubelet's message writes it: millicores for CPU.
func quantityValue(name corev1.ResourceName, q resource.Quantity) int64 {
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// podRequests is what a pod asks of its node, as the scheduler and the kubelet count it
// (containers, sidecars and init containers, the pod's overhead).
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// adoptStarted is when the containers of a pod that this node runs already started (the
// machine restarted), or zero.
func adoptStarted(pod *corev1.Pod) time.Time {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.StartTime == nil {
		return time.Time{}
	}
	return pod.Status.StartTime.Time
}

// restarts reports whether the pod's containers are restarted when they exit.
func restarts(pod *corev1.Pod) bool {
	return pod.Spec.RestartPolicy == "" || pod.Spec.RestartPolicy == corev1.RestartPolicyAlways
}

func durationAnnotation(pod *corev1.Pod, key string) time.Duration {
	d, err := time.ParseDuration(pod.Annotations[key])
	if err != nil || d < 0 {
		return 0
	}
	return d
}

func exitCode(pod *corev1.Pod) int32 {
	v, err := strconv.ParseInt(pod.Annotations[AnnotationExitCode], 10, 32)
	if err != nil {
		return 0
	}
	return int32(v)
}

// stopDuration is how long the pod's containers take to exit once deleted: the longest
// preStop hook (a sleep action, or an exec of `sleep N`) plus AnnotationStopAfter.
func stopDuration(pod *corev1.Pod) time.Duration {
	var hook time.Duration
	for _, c := range pod.Spec.Containers {
		hook = max(hook, preStopDuration(c))
	}
	return hook + durationAnnotation(pod, AnnotationStopAfter)
}

func preStopDuration(c corev1.Container) time.Duration {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	h := c.Lifecycle.PreStop
	if h.Sleep != nil {
		return time.Duration(h.Sleep.Seconds) * time.Second
	}
	if h.Exec != nil {
		cmd := h.Exec.Command
		if len(cmd) == 3 && (cmd[0] == "sh" || cmd[0] == "/bin/sh") && cmd[1] == "-c" {
			cmd = strings.Fields(cmd[2])
		}
		if len(cmd) == 2 && (cmd[0] == "sleep" || cmd[0] == "/bin/sleep") {
			if s, err := strconv.ParseFloat(cmd[1], 64); err == nil && s > 0 {
				return time.Duration(s * float64(time.Second))
			}
		}
	}
	return 0
}

// readyAfter is how long after it started a container passes its readiness probe (its
// initialDelaySeconds; at once without a probe), and started its startup probe.
func readyAfter(c corev1.Container) time.Duration {
	var d time.Duration
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe} {
		if p != nil {
			d += time.Duration(p.InitialDelaySeconds) * time.Second
		}
	}
	return d
}

// exited reports whether the pod's containers have exited by now (pods that are not
// restarted, after AnnotationRunFor).
func exited(pod *corev1.Pod, started, now time.Time) bool {
	return !restarts(pod) && !now.Before(started.Add(durationAnnotation(pod, AnnotationRunFor)))
}

// nextChange is when the pod's status next changes by itself: a container becomes ready, or
// the containers exit.
func nextChange(pod *corev1.Pod, started, now time.Time) (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if exited(pod, started, now) {
		return time.Time{}, false
	}
	if !restarts(pod) {
		consider(started.Add(durationAnnotation(pod, AnnotationRunFor)))
	}
	for _, c := range pod.Spec.Containers {
		consider(started.Add(readyAfter(c)))
	}
	return next, !next.IsZero()
}

// status is the pod's status as the kubelet reports it at now.
func (l *podLoop) status(pod *corev1.Pod, r *podRecord, now time.Time) corev1.PodStatus {
	started := metav1.NewTime(r.started)
	done := exited(pod, r.started, now)
	stopping := !r.killed.IsZero()
	var ended metav1.Time
	var code int32
	switch {
	case stopping:
		ended = metav1.NewTime(r.stopped)
		if done {
			ended = metav1.NewTime(r.started.Add(durationAnnotation(pod, AnnotationRunFor)))
			code = exitCode(pod)
		}
	case done:
		ended = metav1.NewTime(r.started.Add(durationAnnotation(pod, AnnotationRunFor)))
		code = exitCode(pod)
	}
	terminated := stopping || done
	containerState := func(c corev1.Container, ready bool) corev1.ContainerStatus {
		s := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod.UID, c.Name),
		}
		if terminated {
			reason := "Completed"
			if code != 0 {
				reason = "Error"
			}
			s.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: ended, ContainerID: s.ContainerID}
			s.Started = ptr.To(false)
			return s
		}
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: started}
		s.Ready = ready
		s.Started = ptr.To(!now.Before(r.started.Add(startupAfter(c))))
		return s
	}
	status := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: ptr.To(started),
		HostIP:    l.hostIP(),
		QOSClass:  pod.Status.QOSClass,
	}
	if ip := status.HostIP; ip != "" {
		status.HostIPs = []corev1.HostIP{{IP: ip}}
		if pod.Spec.HostNetwork {
			status.PodIP, status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		}
	}
	if !pod.Spec.HostNetwork {
		ip := podIP(pod.UID)
		status.PodIP, status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	allReady := true
	for _, c := range pod.Spec.InitContainers {
		if isSidecar(c) {
			status.InitContainerStatuses = append(status.InitContainerStatuses, containerState(c, true))
			continue
		}
		id := containerID(pod.UID, c.Name)
		status.InitContainerStatuses = append(status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: id, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: started, FinishedAt: started, ContainerID: id}},
		})
	}
	for _, c := range pod.Spec.Containers {
		ready := !now.Before(r.started.Add(readyAfter(c)))
		s := containerState(c, ready)
		allReady = allReady && s.Ready
		status.ContainerStatuses = append(status.ContainerStatuses, s)
	}
	if terminated {
		status.Phase = corev1.PodSucceeded
		if code != 0 {
			status.Phase = corev1.PodFailed
		}
	}
	gates := true
	for _, g := range pod.Spec.ReadinessGates {
		c := podCondition(pod.Status.Conditions, g.ConditionType)
		gates = gates && c != nil && c.Status == corev1.ConditionTrue
	}
	cond := func(typ corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		c := corev1.PodCondition{Type: typ, Status: corev1.ConditionFalse, Reason: reason, LastTransitionTime: metav1.NewTime(now)}
		if ok {
			c.Status, c.Reason = corev1.ConditionTrue, ""
		}
		if old := podCondition(pod.Status.Conditions, typ); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		return c
	}
	notReady := "ContainersNotReady"
	if terminated {
		notReady = "PodCompleted"
	}
	containersReady := allReady && !terminated
	readyReason := notReady
	if containersReady && !gates {
		readyReason = "ReadinessGatesNotReady"
	}
	status.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, !terminated, ""),
		cond(corev1.PodInitialized, true, ""),
		cond(corev1.ContainersReady, containersReady, notReady),
		cond(corev1.PodReady, containersReady && gates, readyReason),
	}
	if terminated {
		status.Conditions[1].Reason = "PodCompleted"
		status.Conditions[1].Status = corev1.ConditionTrue
	}
	// Conditions set by others (PodScheduled, readiness gates, DisruptionTarget) stay theirs.
	return status
}

// startupAfter is how long after it started a container passes its startup probe.
func startupAfter(c corev1.Container) time.Duration {
	if c.StartupProbe == nil {
		return 0
	}
	return time.Duration(c.StartupProbe.InitialDelaySeconds) * time.Second
}

func podCondition(conds []corev1.PodCondition, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// statusEqual reports whether the pod reports want already, as far as the kubelet owns it.
func statusEqual(have, want corev1.PodStatus) bool {
	if have.Phase != want.Phase || have.PodIP != want.PodIP || len(have.ContainerStatuses) != len(want.ContainerStatuses) ||
		len(have.InitContainerStatuses) != len(want.InitContainerStatuses) {
		return false
	}
	for i, w := range want.ContainerStatuses {
		h := have.ContainerStatuses[i]
		if h.Name != w.Name || h.Ready != w.Ready || ptr.Deref(h.Started, false) != ptr.Deref(w.Started, false) ||
			(h.State.Running == nil) != (w.State.Running == nil) || (h.State.Terminated == nil) != (w.State.Terminated == nil) {
			return false
		}
	}
	for _, w := range want.Conditions {
		h := podCondition(have.Conditions, w.Type)
		if h == nil || h.Status != w.Status || h.Reason != w.Reason {
			return false
		}
	}
	return true
}

func (l *podLoop) hostIP() string {
	for _, a := range l.m.addresses() {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// podIP is an address of the pod network for the pod, derived from its UID (no two pods of one
// node share one in practice; nothing routes to it).
func podIP(uid types.UID) string {
	h := sha256.Sum256([]byte(uid))
	return fmt.Sprintf("10.%d.%d.%d", 64+h[0]%64, h[1], 1+h[2]%254)
}

func containerID(uid types.UID, name string) string {
	h := sha256.Sum256([]byte(string(uid) + "/" + name))
	return "containerd://" + hex.EncodeToString(h[:])
}

func imageID(image string) string {
	h := sha256.Sum256([]byte(image))
	repo, _, _ := strings.Cut(image, ":")
	return repo + "@sha256:" + hex.EncodeToString(h[:])
}
