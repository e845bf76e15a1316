// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package devenv is the local environment: a real control plane (also the KubeVirt infra
// cluster, with the simulated virt controller in namespace kubevirt-infra), the fulfiller
// controller (Karpenter core inside) with the local executor, and simulated machines — started in the
// background by `fulfiller-dev dev up` and stopped by `fulfiller-dev dev down`.
package devenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/reportaccess"
	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
	"github.com/fulfiller-sh/fulfiller/internal/proc"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	kubevirtcrds "github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt/standin/crds"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// Namespace is where the controller keeps runs and user data; StateNamespace holds the
// claims' states and locks, where runners have their only rights.
// ClusterName is the local environment's cluster name (FULFILLER_CLUSTER_NAME), labelled on
// every machine.
const (
	Namespace      = "fulfiller"
	StateNamespace = "fulfiller-states"
	ClusterName    = "fulfiller-dev"
)

// OrphanGrace is the controller's FULFILLER_ORPHAN_GRACE here: the shortest it takes.
const OrphanGrace = time.Minute

// RetryBackoff is the controller's FULFILLER_RETRY_BACKOFF here: failed runs are tried again
// 50 times sooner than by default (at most 6 s apart instead of 5 minutes), so that a scenario
// can fail more runs than a claim's run history keeps.
const RetryBackoff = 100 * time.Millisecond

// ModuleRefresh is the controller's FULFILLER_MODULE_REFRESH_INTERVAL here: a class's module
// source is resolved again every 10 s instead of 10 minutes, so that a git tag moved in a
// scenario is seen soon.
const ModuleRefresh = 10 * time.Second

// RepairToleration is the controller's FULFILLER_REPAIR_TOLERATION here, with Karpenter's
// NodeRepair feature gate on: a Node NotReady or Unknown for 30 s instead of 30 minutes is
// replaced, so that a scenario can show a repair.
const RepairToleration = 30 * time.Second

// Layout of an environment folder.
type Layout struct{ Dir string }

func (l Layout) Kubeconfig() string    { return filepath.Join(l.Dir, "kubeconfig") }
func (l Layout) Cluster() string       { return filepath.Join(l.Dir, "cluster") }
func (l Layout) Runs() string          { return filepath.Join(l.Dir, "runs") }
func (l Layout) Machines() string      { return filepath.Join(l.Dir, "machines") }
func (l Layout) Log() string           { return filepath.Join(l.Dir, "dev.log") }
func (l Layout) ControllerLog() string { return filepath.Join(l.Dir, "controller.log") }
func (l Layout) PIDFile() string       { return filepath.Join(l.Dir, "dev.pid") }
func (l Layout) ControllerPID() string { return filepath.Join(l.Dir, "controller.pid") }
func (l Layout) ReadyFile() string     { return filepath.Join(l.Dir, "ready") }
func (l Layout) ServerFile() string    { return filepath.Join(l.Dir, "apiserver") }
func (l Layout) Kubelet() string       { return filepath.Join(l.Dir, "kubelet") }
func (l Layout) ExecutorFile() string  { return filepath.Join(l.Dir, "executor") }

// HcloudFile holds the endpoint of the environment's Hetzner Cloud API stand-in, when it
// runs one (up --hcloud).
func (l Layout) HcloudFile() string { return filepath.Join(l.Dir, "hcloud-endpoint") }

// Executor is the executor the environment in dir runs with.
func (l Layout) Executor() string {
	data, err := os.ReadFile(l.ExecutorFile())
	if err != nil {
		return ExecutorLocal
	}
	return strings.TrimSpace(string(data))
}

// MetricsPortFile holds the port of the controller's Prometheus metrics endpoint.
func (l Layout) MetricsPortFile() string { return filepath.Join(l.Dir, "metrics-port") }

// Up starts the environment in the background and returns once the controller is ready.
// executor is ExecutorLocal (runs are child processes of the controller) or ExecutorJob
// (runs are Jobs, whose pods a stand-in kubelet runs on this machine). With hcloud it also
// runs a Hetzner Cloud API stand-in whose servers are simulated machines (HcloudFile).
func Up(dir string, timeout time.Duration, executor string, hcloud bool) error {
	if executor != ExecutorLocal && executor != ExecutorJob {
		return fmt.Errorf("unknown executor %q (want local or job)", executor)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	l := Layout{dir}
	if pid, ok := alive(l.PIDFile()); ok {
		if _, err := os.Stat(l.ReadyFile()); err == nil {
			return nil
		}
		return fmt.Errorf("an environment (pid %d) is starting in %s", pid, dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	os.Remove(l.ReadyFile())
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(l.Log(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self, "dev", "serve", "--dir", dir, "--executor", executor, fmt.Sprintf("--hcloud=%t", hcloud))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the environment: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(timeout)
	for {
		if _, err := os.Stat(l.ReadyFile()); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the environment exited while starting (%w); see %s:\n%s", proc.WaitError(err), l.Log(), tail(l.Log(), 3000))
		case <-deadline:
			return fmt.Errorf("the environment was not ready after %s; see %s", timeout, l.Log())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Down stops the environment and waits until every process of it is gone.
func Down(dir string, timeout time.Duration) error {
	l := Layout{dir}
	pid, ok := alive(l.PIDFile())
	if !ok {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !proc.Alive(pid, "") {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return fmt.Errorf("the environment (pid %d) did not stop within %s and was killed", pid, timeout)
}

// Serve runs the environment in the foreground until SIGTERM or SIGINT: the control plane,
// the controller (restarted if it exits, as a Deployment would), with hcloud a Hetzner Cloud
// API stand-in and, on the way out, every simulated machine and runner it started.
func Serve(dir, executor string, hcloud bool) error {
	l := Layout{dir}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := os.WriteFile(l.PIDFile(), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(l.ExecutorFile(), []byte(executor), 0o600); err != nil {
		return err
	}
	defer os.Remove(l.PIDFile())
	defer os.Remove(l.ReadyFile())
	os.Remove(l.HcloudFile())
	for _, d := range []string{l.Runs(), l.Machines()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	start := time.Now()
	// KubeVirt's CRDs: the environment's API server is also its KubeVirt infra cluster.
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: l.Cluster(), CRDs: append(controlplane.DefaultCRDs(), kubevirtcrds.CRDs()...)})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		stopMachines(l)
		stopRuns(l)
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	fmt.Printf("control plane ready at %s after %s\n", cp.Server, time.Since(start).Round(time.Millisecond))
	kubeconfig, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.Kubeconfig(), kubeconfig, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(l.ServerFile(), []byte(strings.TrimPrefix(cp.Server, "https://")), 0o600); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	// Runner pods are held to the restricted Pod Security level, as in a cluster.
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: StateNamespace}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
	}
	// What lets a claim's machine report its boot, as the chart installs it.
	kube, err := client.New(cp.Config, client.Options{})
	if err != nil {
		return err
	}
	for _, obj := range reportaccess.Objects(Namespace, "fulfiller-boot-report") {
		if err := kube.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	if hcloud {
		api, err := startHcloud(l)
		if err != nil {
			return err
		}
		defer func() {
			if err := api.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the hcloud stand-in:", err)
			}
			os.Remove(l.HcloudFile())
		}()
	}
	stopKubeVirt, err := startKubeVirt(ctx, l, cp.Config, cs)
	if err != nil {
		return fmt.Errorf("starting the simulated virt controller: %w", err)
	}
	defer stopKubeVirt()
	ctrl := &controller{layout: l}
	if executor == ExecutorJob {
		if err := runnerRBAC(ctx, cs); err != nil {
			return err
		}
		k, err := startRunnerNode(ctx, l, cp, cs, os.Stdout)
		if err != nil {
			return fmt.Errorf("starting the runner node: %w", err)
		}
		defer k.Stop()
		ctrl.jobs = true
	}
	if err := ctrl.start(); err != nil {
		return err
	}
	defer ctrl.stop()
	if err := ctrl.waitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	fmt.Printf("controller ready after %s\n", time.Since(start).Round(time.Millisecond))
	if err := os.WriteFile(l.ReadyFile(), nil, 0o600); err != nil {
		return err
	}
	ctrl.supervise(ctx)
	fmt.Println("stopping")
	return nil
}

// controller is the fulfiller controller process, supervised like a Deployment's pod.
type controller struct {
	layout     Layout
	jobs       bool // the job executor
	cmd        *exec.Cmd
	done       chan struct{}
	healthPort int
}

func (c *controller) start() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tofu, err := controlplane.Tool("tofu")
	if err != nil {
		return err
	}
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		return err
	}
	c.healthPort = ports[1]
	if err := os.WriteFile(c.layout.MetricsPortFile(), []byte(strconv.Itoa(ports[0])), 0o600); err != nil {
		return err
	}
	logf, err := os.OpenFile(c.layout.ControllerLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "controller")
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+c.layout.Kubeconfig(),
		"FULFILLER_NAMESPACE="+Namespace,
		"FULFILLER_CLUSTER_NAME="+ClusterName,
		// The shortest orphan grace the controller takes: machines left without a claim (an
		// e2e scenario makes one) are collected about a minute after they were created, not ten.
		"FULFILLER_ORPHAN_GRACE="+OrphanGrace.String(),
		"FULFILLER_RETRY_BACKOFF="+RetryBackoff.String(),
		"FULFILLER_MODULE_REFRESH_INTERVAL="+ModuleRefresh.String(),
		"FULFILLER_REPAIR_TOLERATION="+RepairToleration.String(),
		"FEATURE_GATES=NodeRepair=true,StaticCapacity=true,NodeOverlay=true",
		"FULFILLER_STATE_NAMESPACE="+StateNamespace,
		"FULFILLER_RUNS_DIR="+c.layout.Runs(),
		"FULFILLER_TOFU="+tofu,
		"FULFILLER_RUNNER_KUBECONFIG="+c.layout.Kubeconfig(),
		"DISABLE_LEADER_ELECTION=true",
		"METRICS_PORT="+strconv.Itoa(ports[0]),
		"HEALTH_PROBE_PORT="+strconv.Itoa(ports[1]),
		"LOG_LEVEL=info",
	)
	if rc, err := controlplane.TofuRC(); err == nil {
		// As the image does: tofu installs providers from the tools' mirror.
		cmd.Env = append(cmd.Env, tofuRCEnv(rc))
	}
	if c.jobs {
		cmd.Env = append(cmd.Env, jobExecutorEnv(tofu)...)
	} else {
		// The local environment's runs take the runner's shortcuts (the module cache, one
		// process per provider), which the executor contract suite checks against the plain
		// path; the chart leaves them off.
		cmd.Env = append(cmd.Env, "FULFILLER_EXECUTOR="+ExecutorLocal, "FULFILLER_RUNNER_SHORTCUTS=true")
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting the controller: %w", err)
	}
	c.cmd, c.done = cmd, make(chan struct{})
	_ = os.WriteFile(c.layout.ControllerPID(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	return nil
}

func (c *controller) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.After(timeout)
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", c.healthPort)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("the controller exited while starting; see %s:\n%s", c.layout.ControllerLog(), tail(c.layout.ControllerLog(), 3000))
		case <-deadline:
			return fmt.Errorf("the controller was not ready after %s; see %s", timeout, c.layout.ControllerLog())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// supervise restarts the controller whenever it exits, until ctx is done.
func (c *controller) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			fmt.Println("controller exited; restarting it")
			if err := c.start(); err != nil {
				fmt.Fprintln(os.Stderr, "restarting the controller:", err)
				return
			}
		}
	}
}

func (c *controller) stop() {
	if c.cmd == nil {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	os.Remove(c.layout.ControllerPID())
}

// stopMachines stops every simulated machine of the environment.
func stopMachines(l Layout) {
	entries, _ := os.ReadDir(l.Machines())
	for _, e := range entries {
		if e.IsDir() {
			_ = sim.Stop(filepath.Join(l.Machines(), e.Name()), 10*time.Second)
		}
	}
}

// stopRuns kills runners still in progress (their whole sessions).
func stopRuns(l Layout) {
	entries, _ := os.ReadDir(l.Runs())
	for _, e := range entries {
		if pid, ok := alive(filepath.Join(l.Runs(), e.Name(), "pid")); ok {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

func alive(pidFile string) (int, bool) {
	pid, ok := proc.ReadPIDFile(pidFile)
	return pid, ok && proc.Alive(pid, "")
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

// startHcloud starts the environment's Hetzner Cloud API stand-in on loopback, where the
// controller and the runners reach it; its servers boot simulated machines (in Machines(),
// stopped with the others) that run this binary. Its endpoint goes into HcloudFile.
func startHcloud(l Layout) (*standin.StandIn, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	api, err := standin.Start(standin.Options{
		Machines: &standin.SimMachines{Dir: l.Machines(), Binary: sim.CommandBeside(self)},
		Log:      os.Stdout,
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(l.HcloudFile(), []byte(api.Endpoint()), 0o600); err != nil {
		_ = api.Close()
		return nil, err
	}
	fmt.Printf("hcloud stand-in at %s\n", api.Endpoint())
	return api, nil
}
