// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/kubelet"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// runnerNodeLabel keeps runner pods on the stand-in kubelet's node.
const runnerNodeLabel = "fulfiller.sh/runner"

// jobCluster is a control plane with a stand-in kubelet whose pods run this test binary as
// the runner.
type jobCluster struct {
	cp        *testenv.ControlPlane
	client    kubernetes.Interface
	namespace string
	kubelet   *kubelet.Kubelet
	logPath   string
}

// startJobCluster starts the control plane and the stand-in kubelet for one test; both stop
// when it ends.
func startJobCluster(t *testing.T) *jobCluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cp, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(cancel)
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	c := &jobCluster{cp: cp, client: client, namespace: "runs", logPath: filepath.Join(t.TempDir(), "kubelet.log")}
	// The API server's Pod Security admission holds runner pods to the restricted level.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts(c.namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fulfiller-runner"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := cp.IssueServingCert([]net.IP{net.ParseIP("127.0.0.1")}, []string{"runner-node"})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(c.logPath)
	if err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	k, err := kubelet.Start(ctx, kubelet.Config{
		Client:   client,
		NodeName: "runner-node",
		Labels:   map[string]string{runnerNodeLabel: "true"},
		Dir:      t.TempDir(),
		Binaries: map[string]string{"fulfiller": exe},
		Env:      []string{mainEnv + "=1"},
		// The image's user (hack/image: user 65532:65532): runner pods must work as it.
		ImageUser: 65532, ImageGroup: 65532,
		ServingCertPEM: certPEM, ServingKeyPEM: keyPEM,
		ClientCAPEM: cp.CAPEM,
		Logf: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			fmt.Fprintf(logFile, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.kubelet = k
	t.Cleanup(func() {
		k.Stop()
		_ = logFile.Close()
		if t.Failed() {
			data, _ := os.ReadFile(c.logPath)
			t.Logf("stand-in kubelet log:\n%s", data)
		}
	})
	return c
}

func (c *jobCluster) executor() *Job {
	return &Job{
		Client:             c.client,
		Namespace:          c.namespace,
		Image:              "fulfiller:test",
		Command:            []string{"fulfiller"}, // the test binary takes Main's flags directly
		ServiceAccountName: "fulfiller-runner",
		Grace:              20 * time.Second,
		Limiter:            NewLimiter(MaxRuns(8)),
		NodeSelector:       map[string]string{runnerNodeLabel: "true"},
	}
}

// kubectlLogs is `kubectl logs job/<name>` against the control plane.
func (c *jobCluster) kubectlLogs(t *testing.T, job string, flags ...string) (string, error) {
	t.Helper()
	kubectl, err := testenv.Tool("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", c.cp.Kubeconfig, "-n", c.namespace, "logs", "job/"+job).CombinedOutput()
	if len(flags) > 0 {
		out, err = exec.Command(kubectl, append([]string{"--kubeconfig", c.cp.Kubeconfig, "-n", c.namespace, "logs", "job/" + job}, flags...)...).CombinedOutput()
	}
	return string(out), err
}

// TestJobExecutorContract runs the executor contract with runs as Jobs on a real control
// plane, run by the stand-in kubelet, and checks what only Jobs have: the log through
// `kubectl logs`, the request only in an owned Secret, the deadline, the run limit.
func TestJobExecutorContract(t *testing.T) {
	c := startJobCluster(t)
	t.Run("Contract", func(t *testing.T) {
		ExecutorContract(t, Contract{
			NewExecutor: func(t *testing.T) Executor { return c.cachedExecutor(t, c.client, nil) },
			Logs: func(t *testing.T, st RunStatus) string {
				name, ok := strings.CutPrefix(st.LogPath, "job/")
				if !ok {
					t.Fatalf("log path %q", st.LogPath)
				}
				out, _ := c.kubectlLogs(t, name)
				return out
			},
			CancelledGone: true,
			RequestExists: func(t *testing.T, _ Executor, run string) bool {
				_, err := c.client.CoreV1().Secrets(c.namespace).Get(context.Background(), run, metav1.GetOptions{})
				return err == nil
			},
			RunnerPod: func(t *testing.T, run string) string {
				pods, err := c.client.CoreV1().Pods(c.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: jobNameLabel + "=" + run})
				if err != nil || len(pods.Items) != 1 {
					t.Fatalf("pods of run %s: %v (%d)", run, err, len(pods.Items))
				}
				return pods.Items[0].Name
			},
		})
	})
	t.Run("JobObjects", func(t *testing.T) { testJobObjects(t, c) })
	t.Run("Credentials", func(t *testing.T) { testJobCredentials(t, c) })
	t.Run("PodSettings", func(t *testing.T) { testJobPodSettings(t, c) })
	t.Run("Deadline", func(t *testing.T) { testJobDeadline(t, c) })
	t.Run("Cache", func(t *testing.T) { testJobCache(t, c) })
}

// cachedExecutor is executor() reading through client, with its cache started (as the
// controller runs it); the cache stops when the test ends.
func (c *jobCluster) cachedExecutor(t *testing.T, client kubernetes.Interface, onEnd func(name string, labels map[string]string)) *Job {
	t.Helper()
	e := c.executor()
	e.Client = client
	e.OnEnd = onEnd
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := e.StartCache(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// readLog records the reads of runner Jobs and pods an API client makes, watches aside.
type readLog struct {
	mu    sync.Mutex
	reads []string
}

func (l *readLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodGet && r.URL.Query().Get("watch") != "true" &&
			(strings.Contains(r.URL.Path, "/jobs") || strings.Contains(r.URL.Path, "/pods")) {
			l.mu.Lock()
			l.reads = append(l.reads, r.URL.String())
			l.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

// take returns the reads recorded since the last take.
func (l *readLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reads
	l.reads = nil
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// testJobCache (issue 25, defect 10): with its cache, admitting runs and polling one read no
// Job or pod from the API server. A run waiting for a slot is refused from memory, however
// often it asks, and Status of a running run reads its Job and pods from the watch; the
// watch reports the run's end (OnEnd), so Status says the end is reported.
func testJobCache(t *testing.T, c *jobCluster) {
	ctx := context.Background()
	reads := &readLog{}
	cfg := rest.CopyConfig(c.cp.Config)
	cfg.Wrap(reads.wrap)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ends := make(chan string, 16)
	e := c.cachedExecutor(t, client, func(name string, labels map[string]string) {
		if labels[keys.LabelNodeClaim] == "cache-a" {
			ends <- name
		}
	})
	e.Limiter = NewLimiter(MaxRuns(1))
	testenv.Eventually(t, 60*time.Second, "the earlier subtests' Jobs to finish", func() bool {
		names, err := e.inProgress(ctx)
		return err == nil && len(names) == 0
	})
	running := nodeRequest(t, "cache-a-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), map[string]string{"sleep_seconds": "60"})
	running.Labels = map[string]string{keys.LabelNodeClaim: "cache-a", keys.LabelNodeClaimUID: "uid-cache-a"}
	if err := e.Start(ctx, running); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "run "+running.Name+" to run", func() bool {
		st, err := e.Status(ctx, running.Name, "uid-cache-a")
		return err == nil && st.Phase == RunRunning
	})
	reads.take()

	waiting := nodeRequest(t, "cache-b-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), nil)
	waiting.Labels = map[string]string{keys.LabelNodeClaim: "cache-b", keys.LabelNodeClaimUID: "uid-cache-b"}
	for range 5 {
		if err := e.Start(ctx, waiting); !errors.Is(err, ErrBusy) {
			t.Fatalf("start beyond MaxRuns(1): %v, want ErrBusy", err)
		}
		if st, err := e.Status(ctx, running.Name, "uid-cache-a"); err != nil || st.Phase != RunRunning || !st.EndReported {
			t.Fatalf("status of %s: %+v, %v", running.Name, st, err)
		}
	}
	if got := reads.take(); len(got) > 0 {
		t.Errorf("5 refused starts and 5 polls read the API server %d times, want none:\n%s", len(got), strings.Join(got, "\n"))
	}
	if err := e.Cancel(ctx, running.Name, "uid-cache-a"); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-ends:
		if name != running.Name {
			t.Errorf("end reported for %s, want %s", name, running.Name)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the end of the cancelled run %s was not reported", running.Name)
	}
	waitEnded(t, e, running.Name)
}

// testJobCredentials: the keys of EnvFromSecrets reach tofu's provisioners as environment
// variables, and their values appear nowhere in the Job.
func testJobCredentials(t *testing.T, c *jobCluster) {
	ctx := context.Background()
	const token = "hcloud-token-0123456789-SECRET"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud-credentials"}, StringData: map[string]string{"HCLOUD_TOKEN": token}}
	if _, err := c.client.CoreV1().Secrets(c.namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := c.executor()
	e.EnvFromSecrets = []string{"cloud-credentials"}
	record := t.TempDir()
	req := nodeRequest(t, "creds-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), map[string]string{"record_dir": record})
	req.Labels = map[string]string{keys.LabelNodeClaim: "creds"}
	if err := e.Start(ctx, req); err != nil {
		t.Fatal(err)
	}
	if st := waitDone(t, e, req.Name); st.Phase != RunSucceeded {
		t.Fatalf("status: %+v %+v", st, st.Result)
	}
	if env := testenv.ReadFile(t, filepath.Join(record, "env")); !strings.Contains(env, "HCLOUD_TOKEN="+token+"\n") {
		t.Errorf("the provisioner's environment has no HCLOUD_TOKEN:\n%s", env)
	}
	job, err := c.client.BatchV1().Jobs(c.namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(job)
	if strings.Contains(string(data), token) || job.Labels[keys.LabelNodeClaim] != "creds" {
		t.Errorf("job %s", data)
	}
}

// testJobPodSettings runs an apply whose runner pod has every extra setting: the API server
// takes the Job and its pod (the Priority admission resolves the priority class, the
// restricted level still holds), the kubelet fills the extra volume, and the tofu
// environment reaches the provisioners under its own names.
func testJobPodSettings(t *testing.T, c *jobCluster) {
	ctx := context.Background()
	core := c.client.CoreV1()
	if _, err := core.ConfigMaps(c.namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ca-bundle"},
		Data: map[string]string{"ca.pem": "-----BEGIN CERTIFICATE-----\n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Secrets(c.namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "backend-credentials"},
		StringData: map[string]string{"ACCESS_KEY": "s3-access-key"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := c.executor()
	e.PriorityClassName = "system-cluster-critical"
	e.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
	e.PodLabels = map[string]string{"example.com/team": "platform"}
	e.PodAnnotations = map[string]string{"example.com/cost-center": "42"}
	e.TofuEnv = []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy.example:3128"},
		{Name: "SSL_CERT_FILE", Value: "/etc/ssl/extra/ca.pem"}}
	e.TofuEnvFrom = []corev1.EnvFromSource{{Prefix: "S3_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "backend-credentials"}}}}
	e.Volumes = []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "ca-bundle"}}}}}
	e.VolumeMounts = []corev1.VolumeMount{{Name: "ca", MountPath: "/etc/ssl/extra", ReadOnly: true}}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	record := t.TempDir()
	req := nodeRequest(t, "settings-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), map[string]string{"record_dir": record})
	req.Labels = map[string]string{keys.LabelNodeClaim: "settings"}
	if err := e.Start(ctx, req); err != nil {
		t.Fatal(err)
	}
	if st := waitDone(t, e, req.Name); st.Phase != RunSucceeded {
		t.Fatalf("status: %+v %+v", st, st.Result)
	}
	env := testenv.ReadFile(t, filepath.Join(record, "env"))
	for _, want := range []string{"HTTPS_PROXY=http://proxy.example:3128\n", "S3_ACCESS_KEY=s3-access-key\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("the provisioner's environment has no %q:\n%s", strings.TrimSpace(want), env)
		}
	}
	pods, err := core.Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel + "=" + req.Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %d, %v", req.Name, len(pods.Items), err)
	}
	pod := pods.Items[0]
	if pod.Spec.PriorityClassName != "system-cluster-critical" || pod.Spec.Priority == nil || *pod.Spec.Priority != 2000000000 {
		t.Errorf("runner pod priority class %q, priority %v: want system-cluster-critical's 2000000000", pod.Spec.PriorityClassName, pod.Spec.Priority)
	}
	if pod.Labels["example.com/team"] != "platform" || pod.Annotations["example.com/cost-center"] != "42" || pod.Labels[keys.LabelNodeClaim] != "settings" {
		t.Errorf("runner pod labels %v, annotations %v", pod.Labels, pod.Annotations)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "registry" {
		t.Errorf("runner pod image pull secrets %v", pod.Spec.ImagePullSecrets)
	}
}

// testJobObjects checks the Job, pod and Secret of the contract's apply: labels, no user data
// outside the Secret, the Secret owned by the Job, the log readable with kubectl.
func testJobObjects(t *testing.T, c *jobCluster) {
	ctx := context.Background()
	name := "contract-a-apply-1"
	job, err := c.client.BatchV1().Jobs(c.namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Labels[keys.LabelOperation] != "apply" || job.Labels[keys.LabelManagedBy] != keys.ManagedBy ||
		*job.Spec.BackoffLimit != 0 || *job.Spec.TTLSecondsAfterFinished != 3600 || *job.Spec.ActiveDeadlineSeconds != 1800 ||
		*job.Spec.Template.Spec.TerminationGracePeriodSeconds != 20 {
		t.Errorf("job: labels %v, spec %+v", job.Labels, job.Spec)
	}
	pods, err := c.client.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel + "=" + name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %d, %v", name, len(pods.Items), err)
	}
	for what, obj := range map[string]any{"Job": job, "pod": &pods.Items[0]} {
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		assertNoSecret(t, what, string(data))
	}
	// A restarted controller (a new executor) sees the run as it was.
	if st, err := c.executor().Status(ctx, name, ""); err != nil || st.Phase != RunSucceeded || st.Result.ProviderID == "" {
		t.Errorf("status from a new executor: %+v, %v", st, err)
	}
	// Runner pods pass the restricted Pod Security level, which the namespace enforces: a pod
	// that does not is refused.
	root := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runs-as-root"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "fulfiller:test", Command: []string{"fulfiller"}}},
	}}
	if _, err := c.client.CoreV1().Pods(c.namespace).Create(ctx, root, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Errorf("a pod without the restricted level's settings: %v, want it refused", err)
	}
	// The request Secret went when the run finished; the Job and its log stay.
	if _, err := c.client.CoreV1().Secrets(c.namespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the request Secret of finished run %s: %v", name, err)
	}
	out, err := c.kubectlLogs(t, name)
	if err != nil {
		t.Fatalf("kubectl logs: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, line := range lines {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line is not JSON: %s", line)
		}
	}
	if len(lines) < 5 || !strings.Contains(out, `"type":"apply_complete"`) {
		t.Errorf("kubectl logs job/%s:\n%s", name, out)
	}
	assertNoSecret(t, "kubectl logs", out)
	// The kubelet endpoint's query parameters: the last line, and following a finished
	// container, which ends.
	if tail, err := c.kubectlLogs(t, name, "--tail=1"); err != nil || tail != lines[len(lines)-1]+"\n" {
		t.Errorf("kubectl logs --tail=1: %q, %v", tail, err)
	}
	if follow, err := c.kubectlLogs(t, name, "--follow"); err != nil || follow != out {
		t.Errorf("kubectl logs --follow: %v\n%s", err, follow)
	}
}

// testJobDeadline: a run past its deadline fails with class Timeout, and its Job counts
// against the limit while it runs.
func testJobDeadline(t *testing.T, c *jobCluster) {
	ctx := context.Background()
	e := c.executor()
	e.Backstop = 3 * time.Second
	e.Limiter = NewLimiter(MaxRuns(1))
	testenv.Eventually(t, 30*time.Second, "the contract's Jobs to finish", func() bool {
		names, err := e.inProgress(ctx)
		return err == nil && len(names) == 0
	})
	req := nodeRequest(t, "deadline-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), map[string]string{"sleep_seconds": "60"})
	req.Labels = map[string]string{keys.LabelNodeClaim: "deadline", keys.LabelNodeClaimUID: "uid-deadline"}
	if err := e.Start(ctx, req); err != nil {
		t.Fatal(err)
	}
	// While the run goes on, its request is in a Secret owned by the Job, labelled like it.
	job, err := c.client.BatchV1().Jobs(c.namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := c.client.CoreV1().Secrets(c.namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if owners := secret.OwnerReferences; len(owners) != 1 || owners[0].UID != job.UID {
		t.Errorf("secret owners: %+v", owners)
	}
	if !strings.Contains(string(secret.Data[tfrunner.RequestFileName]), "abcdef.0123456789abcdef-SECRET") {
		t.Errorf("the request Secret does not hold the user data")
	}
	for _, labels := range []map[string]string{job.Labels, job.Spec.Template.Labels, secret.Labels} {
		if labels[keys.LabelNodeClaimUID] != "uid-deadline" || labels[keys.LabelNodeClaim] != "deadline" {
			t.Errorf("labels %v", labels)
		}
	}
	other := nodeRequest(t, "deadline-apply-2", "node", filepath.Join(t.TempDir(), "state.tfstate"), nil)
	if err := e.Start(ctx, other); !errors.Is(err, ErrBusy) {
		t.Errorf("start beyond MaxConcurrent: %v, want ErrBusy", err)
	}
	st := waitDone(t, e, req.Name)
	if st.Phase != RunFailed || st.Result.Error == nil || st.Result.Error.Class != tfrunner.Timeout {
		t.Errorf("status: %+v %+v", st, st.Result)
	}
}
