// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestMachineRunsPods: the machine's kubelet runs what the scheduler and the controllers of a
// real control plane bind to its Node, as the API server sees a kubelet do it.
func TestMachineRunsPods(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const name = "sim-runs-pods"
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	dir := t.TempDir()
	spec := joinSpec(t, name, tok)
	spec.Taints = nil // no Karpenter here to lift karpenter.sh/unregistered
	cfg := MachineConfig{
		Name:              name,
		UserDataPath:      writeUserData(t, dir, spec),
		Capacity:          corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		HeartbeatInterval: 200 * time.Millisecond,
		StateDir:          filepath.Join(dir, "state"),
	}
	run := startMachine(t, cfg)
	waitForNode(ctx, t, name, nodeReady)
	cs := admin(t)
	ns := testNamespace(ctx, t, cs, "runs-pods")

	t.Run("probe delay", func(t *testing.T) {
		pod := testPod("probed", name)
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{InitialDelaySeconds: 2,
			ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}}
		createPod(ctx, t, cs, ns, pod)
		running := waitForPod(ctx, t, cs, ns, "probed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if podReady(running) {
			t.Errorf("Ready at once, before the probe's initial delay: %+v", running.Status.Conditions)
		}
		ready := waitForPod(ctx, t, cs, ns, "probed", podReady)
		readyAt := podCondition(ready.Status.Conditions, corev1.PodReady).LastTransitionTime
		if d := readyAt.Sub(ready.Status.StartTime.Time); d < 2*time.Second-time.Second/2 {
			// Condition times are whole seconds.
			t.Errorf("Ready %s after the start, want about the probe's 2s initial delay", d)
		}
		cs0 := ready.Status.ContainerStatuses
		if len(cs0) != 1 || cs0[0].State.Running == nil || !cs0[0].Ready || !strings.HasPrefix(cs0[0].ContainerID, "containerd://") {
			t.Errorf("container statuses = %+v", cs0)
		}
		if ready.Status.HostIP != "127.0.0.1" || ready.Status.PodIP == "" {
			t.Errorf("host IP %q, pod IP %q", ready.Status.HostIP, ready.Status.PodIP)
		}
	})

	t.Run("readiness gate", func(t *testing.T) {
		pod := testPod("gated", name)
		pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/attached"}}
		createPod(ctx, t, cs, ns, pod)
		p := waitForPod(ctx, t, cs, ns, "gated", func(p *corev1.Pod) bool {
			c := podCondition(p.Status.Conditions, corev1.ContainersReady)
			return c != nil && c.Status == corev1.ConditionTrue
		})
		if podReady(p) {
			t.Fatal("Ready before its readiness gate passed")
		}
		if c := podCondition(p.Status.Conditions, corev1.PodReady); c == nil || c.Reason != "ReadinessGatesNotReady" {
			t.Errorf("Ready condition = %+v, want reason ReadinessGatesNotReady", c)
		}
		patch := `{"status":{"conditions":[{"type":"example.com/attached","status":"True"}]}}`
		if _, err := cs.CoreV1().Pods(ns).Patch(ctx, "gated", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		waitForPod(ctx, t, cs, ns, "gated", podReady)
	})

	t.Run("job", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "batch"},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationRunFor: "1s"}},
					Spec:       testPod("", name).Spec,
				},
			},
		}
		job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		if _, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			j, err := cs.BatchV1().Jobs(ns).Get(ctx, "batch", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
					return false, fmt.Errorf("job failed: %s", c.Message)
				}
			}
			return j.Status.Succeeded == 1, nil
		})
		if err != nil {
			t.Fatalf("job never succeeded: %v", err)
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=batch"})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("job pods: %v, %v", err, pods)
		}
		p := pods.Items[0]
		term := p.Status.ContainerStatuses[0].State.Terminated
		if p.Status.Phase != corev1.PodSucceeded || term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
			t.Errorf("job pod: phase %s, container %+v", p.Status.Phase, p.Status.ContainerStatuses[0].State)
		}
		if d := term.FinishedAt.Sub(term.StartedAt.Time); d < time.Second/2 || d > 2*time.Second {
			t.Errorf("container ran %s, want about its run-for of 1s", d)
		}
	})

	t.Run("grace period", func(t *testing.T) {
		hooked := testPod("pre-stop", name)
		hooked.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		hooked.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}}
		stubborn := testPod("stubborn", name)
		stubborn.Annotations = map[string]string{AnnotationStopAfter: "1h"}
		stubborn.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3)
		for _, p := range []*corev1.Pod{hooked, stubborn} {
			createPod(ctx, t, cs, ns, p)
		}
		for _, c := range []struct {
			pod      string
			min, max time.Duration
		}{{"pre-stop", 2 * time.Second, 10 * time.Second}, {"stubborn", 3 * time.Second, 10 * time.Second}} {
			waitForPod(ctx, t, cs, ns, c.pod, podReady)
			start := time.Now()
			if err := cs.CoreV1().Pods(ns).Delete(ctx, c.pod, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			// Terminating, the pod is not ready any more.
			waitForPod(ctx, t, cs, ns, c.pod, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
			waitForPodGone(ctx, t, cs, ns, c.pod)
			if d := time.Since(start); d < c.min || d > c.max {
				t.Errorf("pod %s gone %s after its deletion, want %s to %s", c.pod, d, c.min, c.max)
			}
		}
		if log := run.log.String(); !strings.Contains(log, "pod "+ns+"/stubborn terminated after 3s") {
			t.Errorf("log lacks the stubborn pod's termination after its grace period:\n%s", log)
		}
	})

	t.Run("out of cpu", func(t *testing.T) {
		// Bound without the scheduler, as a pod with spec.nodeName is: the kubelet refuses it.
		big := testPod("too-big", name)
		big.Spec.NodeName, big.Spec.NodeSelector = name, nil
		big.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
		createPod(ctx, t, cs, ns, big)
		p := waitForPod(ctx, t, cs, ns, "too-big", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if p.Status.Reason != "OutOfcpu" || !strings.Contains(p.Status.Message, "cpu, requested: 3000") {
			t.Errorf("refused pod: reason %q, message %q", p.Status.Reason, p.Status.Message)
		}
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=too-big,reason=OutOfcpu"})
			return err == nil && len(evs.Items) > 0, err
		})
		if err != nil {
			t.Errorf("no OutOfcpu event: %v", err)
		}
	})

	t.Run("daemonset", func(t *testing.T) {
		labels := map[string]string{"app": "agent"}
		tmpl := testPod("", name)
		tmpl.Labels = labels
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
			},
		}
		if _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			d, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
			return err == nil && d.Status.DesiredNumberScheduled == 1 && d.Status.NumberReady == 1, err
		})
		if err != nil {
			t.Fatalf("the DaemonSet's pod never became ready: %v", err)
		}
	})

	t.Run("disruption budget", func(t *testing.T) {
		pod := testPod("guarded", name)
		pod.Labels = map[string]string{"app": "guarded"}
		createPod(ctx, t, cs, ns, pod)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: pod.Labels}},
		}
		if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForPod(ctx, t, cs, ns, "guarded", podReady)
		// The disruption controller counts the pod healthy because the kubelet reports it Ready.
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			b, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guarded", metav1.GetOptions{})
			return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1, err
		})
		if err != nil {
			t.Fatalf("PDB never saw the pod healthy: %v", err)
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns}}
		if err := cs.CoreV1().Pods(ns).EvictV1(ctx, ev); !apierrors.IsTooManyRequests(err) {
			t.Errorf("eviction against the budget = %v, want 429 Too Many Requests", err)
		}
	})

	t.Run("injected condition", func(t *testing.T) {
		err := InjectConditions(cfg.StateDir, []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "PLEG is not healthy"},
			{Type: "GPUHealthy", Status: corev1.ConditionFalse, Reason: "XidError", Message: "GPU fell off the bus"},
		})
		if err != nil {
			t.Fatal(err)
		}
		n := waitForNode(ctx, t, name, func(n *corev1.Node) bool { return !nodeReady(n) })
		if c := condition(n, corev1.NodeReady); c.Reason != "KubeletNotReady" || c.Message != "PLEG is not healthy" {
			t.Errorf("Ready = %+v", c)
		}
		if c := condition(n, "GPUHealthy"); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "XidError" {
			t.Errorf("GPUHealthy = %+v", c)
		}
		if err := InjectConditions(cfg.StateDir, nil); err != nil {
			t.Fatal(err)
		}
		waitForNode(ctx, t, name, nodeReady)
	})
}

func testNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The service account controller creates the namespace's default ServiceAccount, which
	// admission wants before it admits a pod.
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no default ServiceAccount in %s: %v", name, err)
	}
	return name
}

// testPod is a pod for node that the scheduler places there.
func testPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                 map[string]string{corev1.LabelHostname: node},
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
		},
	}
}

func createPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, pod *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitForPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s/%s: %v (last seen: %+v)", ns, name, err, pod.Status)
	}
	return pod
}

func waitForPodGone(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("pod %s/%s never went: %v", ns, name, err)
	}
}

func podReady(p *corev1.Pod) bool {
	c := podCondition(p.Status.Conditions, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	req := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
	}
	for _, c := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"containers add up", corev1.PodSpec{Containers: []corev1.Container{{Resources: req("100m")}, {Resources: req("250m")}}}, "350m"},
		{"a larger init container wins", corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: req("1")}},
			Containers:     []corev1.Container{{Resources: req("100m")}}}, "1"},
		{"sidecars run beside both", corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: req("200m"), RestartPolicy: &always}, {Resources: req("1")}},
			Containers:     []corev1.Container{{Resources: req("100m")}}}, "1200m"},
		{"overhead counts", corev1.PodSpec{
			Overhead:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
			Containers: []corev1.Container{{Resources: req("100m")}}}, "150m"},
	} {
		got := podRequests(&corev1.Pod{Spec: c.spec})[corev1.ResourceCPU]
		if want := resource.MustParse(c.want); got.Cmp(want) != 0 {
			t.Errorf("%s: cpu %s, want %s", c.name, got.String(), c.want)
		}
	}
}

func TestStopDuration(t *testing.T) {
	hook := func(h corev1.LifecycleHandler) corev1.Container {
		return corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &h}}
	}
	for _, c := range []struct {
		name        string
		containers  []corev1.Container
		annotations map[string]string
		want        time.Duration
	}{
		{"none", []corev1.Container{{}}, nil, 0},
		{"sleep action", []corev1.Container{hook(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}})}, nil, 5 * time.Second},
		{"exec sleep", []corev1.Container{hook(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 2.5"}}})}, nil, 2500 * time.Millisecond},
		{"other exec", []corev1.Container{hook(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"nginx", "-s", "quit"}}})}, nil, 0},
		{"longest hook and the stop time", []corev1.Container{
			hook(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}),
			hook(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}),
		}, map[string]string{AnnotationStopAfter: "2s"}, 5 * time.Second},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: c.annotations}, Spec: corev1.PodSpec{Containers: c.containers}}
		if got := stopDuration(pod); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
