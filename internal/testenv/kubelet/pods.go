// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// maxTerminationMessage is what a kubelet reads of a termination message file.
const maxTerminationMessage = 4096

// podWorker runs one pod. deleting is closed when the pod is marked for deletion (grace is
// then its grace period); finished is closed when the container has ended and its status is
// posted.
type podWorker struct {
	deleting chan struct{}
	grace    time.Duration
	finished chan struct{}
}

// watchPods runs the pods bound to the node until ctx ends.
func (k *Kubelet) watchPods(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String()
		}))
	informer := factory.Core().V1().Pods().Informer()
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.sync(ctx, obj) },
		UpdateFunc: func(_, obj any) { k.sync(ctx, obj) },
		DeleteFunc: func(obj any) { k.forget(obj) },
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

// sync starts a worker for a new pod and passes a deletion on to it.
func (k *Kubelet) sync(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	w, known := k.pods[pod.UID]
	if !known {
		w = &podWorker{deleting: make(chan struct{}), finished: make(chan struct{})}
		k.pods[pod.UID] = w
	}
	deleting := pod.DeletionTimestamp != nil
	if deleting {
		select {
		case <-w.deleting:
		default:
			w.grace = time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 30)) * time.Second
			close(w.deleting)
		}
	}
	k.mu.Unlock()

	switch {
	case !known && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed):
		// Finished before this kubelet started: nothing to run.
		close(w.finished)
		if deleting {
			k.wg.Go(func() { k.deletePod(ctx, pod.Namespace, pod.Name, pod.UID) })
		}
	case !known:
		k.wg.Go(func() { k.runPod(ctx, pod.DeepCopy(), w) })
	}
}

// forget kills the container of a pod that was removed without a graceful deletion (grace 0,
// or its Node's kubelet never saw the deletion).
func (k *Kubelet) forget(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if w, ok := k.pods[pod.UID]; ok && !isClosed(w.deleting) {
		w.grace = 0
		close(w.deleting)
	}
}

// runPod prepares the pod's volumes, runs its first container to the end (or until the pod is
// deleted) and reports each step in the pod's status.
func (k *Kubelet) runPod(ctx context.Context, pod *corev1.Pod, w *podWorker) {
	defer close(w.finished)
	name := pod.Namespace + "/" + pod.Name
	dir := PodDir(k.cfg.Dir, pod)
	container := pod.Spec.Containers[0]
	start := metav1.Now()
	k.setStatus(ctx, pod, func(s *corev1.PodStatus) {
		s.StartTime = &start
		s.Phase = corev1.PodPending
		s.ContainerStatuses = []corev1.ContainerStatus{containerStatus(container, corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"},
		})}
	})

	var cmd *exec.Cmd
	var termPath, logPath string
	var err error
	for {
		cmd, termPath, logPath, err = k.prepare(ctx, pod, dir)
		if err == nil || !errors.Is(err, errNotYet) {
			break
		}
		select { // a kubelet retries a missing Secret until the pod goes away
		case <-ctx.Done():
			return
		case <-w.deleting:
			k.finish(ctx, pod, container, &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerCannotRun", Message: err.Error()}, true)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	var fails *errContainerFails
	if errors.As(err, &fails) {
		// On a real node the container would start and fail: say why in its log.
		k.cfg.Logf("kubelet: pod %s: %v", name, err)
		_ = os.WriteFile(logPath, []byte("stand-in kubelet: "+fails.msg+"\n"), 0o600)
		k.mu.Lock()
		k.logs[logKey(pod.Namespace, pod.Name, container.Name)] = &containerLog{path: logPath, done: closedChan()}
		k.mu.Unlock()
		now := metav1.Now()
		k.finish(ctx, pod, container, &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: now, FinishedAt: now}, isClosed(w.deleting))
		return
	}
	if err == nil && isClosed(w.deleting) {
		err = errors.New("pod deleted before its container started")
	}
	if err != nil {
		k.cfg.Logf("kubelet: pod %s: %v", name, err)
		k.finish(ctx, pod, container, &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error()}, isClosed(w.deleting))
		return
	}
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err == nil {
		cmd.Stdout, cmd.Stderr = logFile, logFile
		err = cmd.Start()
		_ = logFile.Close()
	}
	if err != nil {
		k.finish(ctx, pod, container, &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error()}, isClosed(w.deleting))
		return
	}
	started := metav1.Now()
	exited := make(chan struct{})
	k.mu.Lock()
	k.logs[logKey(pod.Namespace, pod.Name, container.Name)] = &containerLog{path: logPath, done: exited}
	k.mu.Unlock()
	go func() { _ = cmd.Wait(); close(exited) }()
	k.cfg.Logf("kubelet: pod %s: started %v (pid %d)", name, cmd.Args, cmd.Process.Pid)
	// The container's process group, for tests that kill a container as a crashed node would.
	_ = os.WriteFile(filepath.Join(dir, PIDFileName), []byte(itoa(cmd.Process.Pid)), 0o600)
	k.setStatus(ctx, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{containerStatus(container, corev1.ContainerState{
			Running: &corev1.ContainerStateRunning{StartedAt: started},
		})}
		s.ContainerStatuses[0].Ready, s.ContainerStatuses[0].Started = true, ptr.To(true)
		s.ContainerStatuses[0].ContainerID = "standin://" + itoa(cmd.Process.Pid)
	})

	pgid := cmd.Process.Pid // the container is its own session
	deleted := false
	select {
	case <-exited:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
		return
	case <-w.deleting:
		deleted = true
		k.cfg.Logf("kubelet: pod %s: deleted, SIGTERM and %s grace", name, w.grace)
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(w.grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
		case <-ctx.Done():
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
			return
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // nothing of the container outlives it
	state := &corev1.ContainerStateTerminated{StartedAt: started, FinishedAt: metav1.Now(), ContainerID: "standin://" + itoa(pgid)}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		state.ExitCode, state.Signal = 128+int32(ws.Signal()), int32(ws.Signal())
	} else {
		state.ExitCode = int32(cmd.ProcessState.ExitCode())
	}
	state.Reason = "Completed"
	if state.ExitCode != 0 {
		state.Reason = "Error"
	}
	state.Message = terminationMessage(termPath, logPath, container, state.ExitCode)
	k.cfg.Logf("kubelet: pod %s: container exited with %d", name, state.ExitCode)
	k.finish(ctx, pod, container, state, deleted || isClosed(w.deleting))
}

// finish posts the container's end and the pod's final phase; a pod marked for deletion is
// then removed, as a kubelet does once its containers are gone.
func (k *Kubelet) finish(ctx context.Context, pod *corev1.Pod, container corev1.Container, state *corev1.ContainerStateTerminated, deleting bool) {
	k.setStatus(ctx, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodSucceeded
		if state.ExitCode != 0 {
			s.Phase = corev1.PodFailed
		}
		s.ContainerStatuses = []corev1.ContainerStatus{containerStatus(container, corev1.ContainerState{Terminated: state})}
		s.ContainerStatuses[0].ContainerID = state.ContainerID
		s.ContainerStatuses[0].Started = ptr.To(false)
	})
	if deleting {
		k.deletePod(ctx, pod.Namespace, pod.Name, pod.UID)
	}
}

// deletePod removes a pod whose containers are gone (grace 0, this UID only). The pod of a
// worker that already finished is deleted when its deletion is seen later (sync).
func (k *Kubelet) deletePod(ctx context.Context, namespace, name string, uid types.UID) {
	err := k.cfg.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.cfg.Logf("kubelet: deleting pod %s/%s: %v", namespace, name, err)
	}
}

// setStatus applies change to the pod's current status and writes it, retrying conflicts.
func (k *Kubelet) setStatus(ctx context.Context, pod *corev1.Pod, change func(*corev1.PodStatus)) {
	pods := k.cfg.Client.CoreV1().Pods(pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if current.UID != pod.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		s := &current.Status
		s.HostIP, s.PodIP = "127.0.0.1", "127.0.0.1"
		s.HostIPs, s.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: "127.0.0.1"}}
		change(s)
		running := s.Phase == corev1.PodRunning
		setCondition(s, corev1.PodReadyToStartContainers, true)
		setCondition(s, corev1.PodInitialized, true)
		setCondition(s, corev1.ContainersReady, running)
		setCondition(s, corev1.PodReady, running)
		_, err = pods.UpdateStatus(ctx, current, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.cfg.Logf("kubelet: updating status of pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, ok bool) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != status {
				s.Conditions[i].Status, s.Conditions[i].LastTransitionTime = status, metav1.Now()
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()})
}

func containerStatus(c corev1.Container, state corev1.ContainerState) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "standin://" + c.Image, State: state}
}

// terminationMessage reads the file that stands for the container's termination message
// path (at most 4096 bytes), falling back to the log's tail when the policy says so.
func terminationMessage(path, logPath string, c corev1.Container, exitCode int32) string {
	msg := readAtMost(path, maxTerminationMessage, false)
	if msg == "" && exitCode != 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		msg = readAtMost(logPath, 2048, true)
	}
	return msg
}

func readAtMost(path string, n int, tail bool) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(data) > n {
		if tail {
			data = data[len(data)-n:]
		} else {
			data = data[:n]
		}
	}
	return string(data)
}

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errNotYet marks something a pod needs that may still appear (a Secret created after the Job).
var errNotYet = errors.New("not there yet")

// notYet marks a missing object as one that may still appear.
func notYet(err error) error {
	if apierrors.IsNotFound(err) {
		return errors.Join(err, errNotYet)
	}
	return err
}

// prepare materialises the pod's volumes under dir and builds the container's command with
// its paths rewritten (see the package comment).
func (k *Kubelet) prepare(ctx context.Context, pod *corev1.Pod, dir string) (cmd *exec.Cmd, termPath, logPath string, err error) {
	c := pod.Spec.Containers[0]
	logPath = filepath.Join(dir, c.Name+".log")
	id, err := k.containerIdentity(pod, c)
	if err != nil {
		return nil, "", logPath, err
	}
	volumes := map[string]string{}
	writable := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		local := filepath.Join(dir, "volumes", v.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			return nil, "", "", err
		}
		// An emptyDir is world-writable; Secret and projected volumes are tmpfs mounts
		// (world-writable and sticky), ConfigMaps wrapped emptyDirs. The files in them are
		// read-only for the container; fsGroup then gives the pod's group access.
		mode := fs.FileMode(0o777)
		if v.Secret != nil || v.Projected != nil {
			mode |= fs.ModeSticky
		}
		if err := os.Chmod(local, mode); err != nil {
			return nil, "", "", err
		}
		if err := k.fillVolume(ctx, pod, v, local); err != nil {
			return nil, "", "", fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if err := setVolumeOwnership(local, fsGroup(pod), v.EmptyDir == nil); err != nil {
			return nil, "", "", fmt.Errorf("volume %s: setting its ownership: %w", v.Name, err)
		}
		volumes[v.Name] = local
		writable[v.Name] = v.EmptyDir != nil
	}
	var paths pathMap
	var mounts []accessMount
	for _, m := range c.VolumeMounts {
		local, ok := volumes[m.Name]
		if !ok {
			return nil, "", "", fmt.Errorf("volume mount %s names no volume", m.Name)
		}
		if m.SubPath != "" {
			local = filepath.Join(local, m.SubPath)
		}
		paths = append(paths, pathMapping{from: filepath.Clean(m.MountPath), to: local})
		mounts = append(mounts, accessMount{containerPath: m.MountPath, local: local, write: writable[m.Name] && !m.ReadOnly})
	}
	// A kubelet makes the termination message file writable for any user.
	termPath = filepath.Join(dir, "termination-log")
	if err := os.WriteFile(termPath, nil, 0o666); err != nil {
		return nil, "", "", err
	}
	if err := os.Chmod(termPath, 0o666); err != nil {
		return nil, "", "", err
	}
	containerTerm := c.TerminationMessagePath
	if containerTerm == "" {
		containerTerm = corev1.TerminationMessagePathDefault
	}
	if err := checkAccess(id, mounts, termPath, containerTerm); err != nil {
		return nil, "", logPath, err
	}
	paths = newPathMap(append(paths, pathMapping{from: containerTerm, to: termPath}), k.cfg.ImagePaths)

	env, err := k.environment(ctx, pod, c)
	if err != nil {
		return nil, "", "", err
	}
	for i, kv := range env {
		if name, value, ok := strings.Cut(kv, "="); ok {
			env[i] = name + "=" + paths.rewrite(value)
		}
	}
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(c.Command) == 0 {
		return nil, "", "", errors.New("the stand-in kubelet has no image config: the container needs a command")
	}
	for i := range argv {
		argv[i] = paths.rewrite(argv[i])
	}
	if bin, ok := k.cfg.Binaries[argv[0]]; ok {
		argv[0] = bin
	}
	// The container gets its own UTS namespace with the pod's hostname, as a container runtime
	// gives it (tofu records user@hostname as its state lock's holder). The shell sets it and
	// then becomes the command.
	argv = append([]string{"/bin/sh", "-c", `echo "$0" > /proc/sys/kernel/hostname && exec "$@"`, podHostname(pod)}, argv...)
	cmd = exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	if c.WorkingDir != "" {
		cmd.Dir = paths.rewrite(c.WorkingDir)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWUTS}
	return cmd, termPath, logPath, nil
}

// fillVolume writes a volume's files: Secrets, ConfigMaps and projected service-account
// tokens; an emptyDir stays empty. Other kinds are refused.
func (k *Kubelet) fillVolume(ctx context.Context, pod *corev1.Pod, v corev1.Volume, local string) error {
	core := k.cfg.Client.CoreV1()
	switch {
	case v.EmptyDir != nil:
		return nil
	case v.Secret != nil:
		s, err := core.Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if ptr.Deref(v.Secret.Optional, false) {
				return nil
			}
			return fmt.Errorf("secret %s: %w", v.Secret.SecretName, errNotYet)
		}
		if err != nil {
			return err
		}
		return writeKeys(local, s.Data, v.Secret.Items, ptr.Deref(v.Secret.DefaultMode, 0o644))
	case v.ConfigMap != nil:
		cm, err := core.ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if ptr.Deref(v.ConfigMap.Optional, false) {
				return nil
			}
			return fmt.Errorf("configmap %s: %w", v.ConfigMap.Name, errNotYet)
		}
		if err != nil {
			return err
		}
		return writeKeys(local, stringsToBytes(cm.Data), v.ConfigMap.Items, ptr.Deref(v.ConfigMap.DefaultMode, 0o644))
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			if err := k.fillProjection(ctx, pod, src, local, ptr.Deref(v.Projected.DefaultMode, 0o644)); err != nil {
				return err
			}
		}
		return nil
	}
	return errors.New("the stand-in kubelet supports emptyDir, secret, configMap and projected volumes only")
}

func (k *Kubelet) fillProjection(ctx context.Context, pod *corev1.Pod, src corev1.VolumeProjection, local string, mode int32) error {
	core := k.cfg.Client.CoreV1()
	switch {
	case src.ServiceAccountToken != nil:
		tr, err := core.ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				Audiences:         nonEmpty(src.ServiceAccountToken.Audience),
				ExpirationSeconds: src.ServiceAccountToken.ExpirationSeconds,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("requesting a token: %w", err)
		}
		// As a kubelet writes it: private (0600) to the pod's user when all its containers
		// run as one, or to its fsGroup; otherwise with the volume's mode.
		path := filepath.Join(local, src.ServiceAccountToken.Path)
		user := fsUser(pod)
		tokenMode := os.FileMode(mode)
		if user != nil || fsGroup(pod) != nil {
			tokenMode = 0o600
		}
		if err := os.WriteFile(path, []byte(tr.Status.Token), tokenMode); err != nil {
			return err
		}
		if err := os.Chmod(path, tokenMode); err != nil {
			return err
		}
		if user != nil {
			return os.Chown(path, int(*user), -1)
		}
		return nil
	case src.ConfigMap != nil:
		cm, err := core.ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("configmap %s: %w", src.ConfigMap.Name, errNotYet)
		}
		if err != nil {
			return err
		}
		return writeKeys(local, stringsToBytes(cm.Data), src.ConfigMap.Items, mode)
	case src.Secret != nil:
		s, err := core.Secrets(pod.Namespace).Get(ctx, src.Secret.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("secret %s: %w", src.Secret.Name, errNotYet)
		}
		if err != nil {
			return err
		}
		return writeKeys(local, s.Data, src.Secret.Items, mode)
	case src.DownwardAPI != nil:
		for _, item := range src.DownwardAPI.Items {
			if item.FieldRef == nil {
				continue
			}
			value, err := fieldValue(pod, item.FieldRef.FieldPath)
			if err != nil {
				return err
			}
			path := filepath.Join(local, item.Path)
			perm := os.FileMode(ptr.Deref(item.Mode, mode))
			if err := os.WriteFile(path, []byte(value), perm); err != nil {
				return err
			}
			if err := os.Chmod(path, perm); err != nil {
				return err
			}
		}
	}
	return nil
}

// podHostname is a pod's hostname as a kubelet sets it: spec.hostname, or the pod's name, at
// most 63 characters without a trailing dash or dot.
func podHostname(pod *corev1.Pod) string {
	host := pod.Name
	if pod.Spec.Hostname != "" {
		host = pod.Spec.Hostname
	}
	if len(host) > 63 {
		host = strings.TrimRight(host[:63], "-.")
	}
	return host
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath, mode int32) error {
	if len(items) == 0 {
		for key := range data {
			items = append(items, corev1.KeyToPath{Key: key, Path: key})
		}
	}
	for _, item := range items {
		value, ok := data[item.Key]
		if !ok {
			return fmt.Errorf("no key %s", item.Key)
		}
		path := filepath.Join(dir, item.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		perm := os.FileMode(ptr.Deref(item.Mode, mode))
		if err := os.WriteFile(path, value, perm); err != nil {
			return err
		}
		if err := os.Chmod(path, perm); err != nil {
			return err
		}
	}
	return nil
}

func stringsToBytes(m map[string]string) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}

// environment is the container's environment: PATH of this process, HOSTNAME, Config.Env,
// then the container's envFrom and env (values, Secret and ConfigMap keys, pod fields).
func (k *Kubelet) environment(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]string, error) {
	core := k.cfg.Client.CoreV1()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOSTNAME=" + podHostname(pod)}
	if host, port, err := net.SplitHostPort(k.cfg.APIServer); err == nil {
		env = append(env, "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port)
	}
	env = append(env, k.cfg.Env...)
	for _, from := range c.EnvFrom {
		var data map[string][]byte
		switch {
		case from.SecretRef != nil:
			s, err := core.Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && ptr.Deref(from.SecretRef.Optional, false) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, notYet(err))
			}
			data = s.Data
		case from.ConfigMapRef != nil:
			cm, err := core.ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && ptr.Deref(from.ConfigMapRef.Optional, false) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, notYet(err))
			}
			data = stringsToBytes(cm.Data)
		}
		keys := make([]string, 0, len(data))
		for key := range data {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			env = append(env, from.Prefix+key+"="+string(data[key]))
		}
	}
	for _, e := range c.Env {
		value := e.Value
		if ref := e.ValueFrom; ref != nil {
			var err error
			switch {
			case ref.SecretKeyRef != nil:
				var s *corev1.Secret
				if s, err = core.Secrets(pod.Namespace).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{}); err == nil {
					value = string(s.Data[ref.SecretKeyRef.Key])
				}
			case ref.ConfigMapKeyRef != nil:
				var cm *corev1.ConfigMap
				if cm, err = core.ConfigMaps(pod.Namespace).Get(ctx, ref.ConfigMapKeyRef.Name, metav1.GetOptions{}); err == nil {
					value = cm.Data[ref.ConfigMapKeyRef.Key]
				}
			case ref.FieldRef != nil:
				value, err = fieldValue(pod, ref.FieldRef.FieldPath)
			}
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, notYet(err))
			}
		}
		env = append(env, e.Name+"="+value)
	}
	return env, nil
}

func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", nil
	}
	if key, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(key, "']")], nil
	}
	return "", fmt.Errorf("field %s is not supported by the stand-in kubelet", path)
}

// pathMap rewrites container paths to local ones, longest container path first.
type pathMap []pathMapping

type pathMapping struct{ from, to string }

// newPathMap orders mounts longest container path first, after adding the image's paths as
// mappings to themselves: a path under one stays as it is, though a mount covers its parent.
func newPathMap(mounts []pathMapping, imagePaths []string) pathMap {
	p := append(pathMap{}, mounts...)
	for _, dir := range imagePaths {
		p = append(p, pathMapping{from: filepath.Clean(dir), to: filepath.Clean(dir)})
	}
	sort.SliceStable(p, func(i, j int) bool { return len(p[i].from) > len(p[j].from) })
	return p
}

// rewrite maps s when it is a container path under a mapping, or a --flag=PATH whose value is.
func (p pathMap) rewrite(s string) string {
	if flag, value, ok := strings.Cut(s, "="); ok && strings.HasPrefix(flag, "-") {
		return flag + "=" + p.rewrite(value)
	}
	for _, m := range p {
		if s == m.from {
			return m.to
		}
		if rest, ok := strings.CutPrefix(s, m.from+"/"); ok {
			return filepath.Join(m.to, rest)
		}
	}
	return s
}

// PIDFileName is the file in a pod's folder that holds its container's process (group) ID.
const PIDFileName = "container.pid"

// PodDir is the folder of a pod under a stand-in kubelet's Config.Dir, named by the pod's
// UID as a kubelet names it, cut short: its volumes are here, and a container's /tmp holds
// unix sockets (tofu's providers listen on one in TMPDIR) whose paths may not exceed 107
// bytes, which a real container's /tmp/... never comes near.
func PodDir(kubeletDir string, pod *corev1.Pod) string {
	return filepath.Join(kubeletDir, string(pod.UID)[:min(len(pod.UID), 13)])
}

// KillContainer kills a pod's running container at once (SIGKILL to its process group), as a
// node crash or the OOM killer would; the kubelet that runs it then reports it terminated.
// It works from any process on the machine.
func KillContainer(kubeletDir string, pod *corev1.Pod) error {
	data, err := os.ReadFile(filepath.Join(PodDir(kubeletDir, pod), PIDFileName))
	if err != nil {
		return fmt.Errorf("pod %s/%s has no running container here: %w", pod.Namespace, pod.Name, err)
	}
	var pid int
	if _, err := fmt.Sscanf(string(data), "%d", &pid); err != nil || pid <= 1 {
		return fmt.Errorf("pod %s/%s: bad pid file %q", pod.Namespace, pod.Name, data)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
