// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package image

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/proc"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// TestControllerInImage starts the image's entrypoint and command, the controller, as the
// chart's Deployment runs it: the environment `helm template` renders for its container,
// the image's user, /tmp and /var/lib/fulfiller writable as the chart's emptyDir volumes
// are, and a network that reaches only the test's API server (with Karpenter's and the
// fulfiller's CRDs). It must become ready, /healthz and /readyz answering 200, and serve
// /metrics, each read inside the controller's network namespace as a kubelet's probe would.
func TestControllerInImage(t *testing.T) {
	fs := rootfs(t)
	cp := testenv.StartT(t, testenv.Options{CRDs: testenv.DefaultCRDs()})
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	ctx := context.Background()
	for _, ns := range []string{"fulfiller", "fulfiller-states"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	server, err := url.Parse(cp.Server)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := imageUser()
	for _, dir := range []string{"tmp/controller", "var/lib/fulfiller"} {
		if err := os.MkdirAll(filepath.Join(fs, dir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := chownTree(filepath.Join(fs, dir), int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fs, "tmp", "controller", "kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(fs, "tmp", "controller", "kubeconfig"), int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}

	container := renderController(t)
	env := []string{"KUBECONFIG=/tmp/controller/kubeconfig"}
	var healthPort, metricsPort string
	for _, e := range container.Env {
		switch {
		case e.ValueFrom != nil:
			continue // MEMORY_LIMIT, CPU_REQUESTS: from the pod's resources
		case e.Name == "HEALTH_PROBE_PORT":
			healthPort = e.Value
		case e.Name == "METRICS_PORT":
			metricsPort = e.Value
		}
		env = append(env, e.Name+"="+e.Value)
	}
	if healthPort == "" || metricsPort == "" {
		t.Fatalf("the chart's controller has no HEALTH_PROBE_PORT or METRICS_PORT: %+v", container.Env)
	}
	config := images["amd64"].config.Config
	if len(container.Command) > 0 {
		t.Fatalf("the chart overrides the image's entrypoint with %v", container.Command)
	}
	args := config.Cmd
	if len(container.Args) > 0 {
		args = container.Args
	}
	ns := newNetNS(t, server.Host)
	var log testenv.SyncBuffer
	cmd := imageCmd(fs, config.WorkingDir, env, config.Entrypoint[0], append(config.Entrypoint[1:], args...)...)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := ns.start(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			err = <-exited
		}
		t.Logf("controller stopped: %v", proc.WaitError(err))
	})

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) { return ns.dial(addr) },
	}}
	get := func(port, path string) (int, string, error) {
		resp, err := client.Get("http://" + net.JoinHostPort("127.0.0.1", port) + path)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	var last string
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err = wait.PollUntilContextCancel(pctx, 500*time.Millisecond, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("the controller exited: %w", proc.WaitError(err))
		default:
		}
		code, body, err := get(healthPort, "/readyz")
		last = fmt.Sprintf("%d %v %s", code, err, body)
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for the controller in the image to be ready (last /readyz: %s): %v\ncontroller log:\n%s", last, err, tailOf(log.String(), 6000))
	}
	if code, body, err := get(healthPort, "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz: %d %v %s", code, err, body)
	}
	// /readyz turns ready once the CRDs are there; the controllers, and with them
	// controller-runtime's reconcile counters, start after the informers' caches sync.
	err = wait.PollUntilContextCancel(pctx, 500*time.Millisecond, true, func(context.Context) (bool, error) {
		code, body, err := get(metricsPort, "/metrics")
		last = fmt.Sprintf("%d %v (%d bytes)", code, err, len(body))
		return err == nil && code == http.StatusOK && strings.Contains(body, "controller_runtime_reconcile_total"), nil
	})
	if err != nil {
		t.Errorf("/metrics never showed controller-runtime's reconcile counters (last: %s): %v\ncontroller log:\n%s", last, err, tailOf(log.String(), 6000))
	}
}

// renderController is the controller container of the Deployment `helm template` renders
// with the chart's defaults, leader election off (one process).
func renderController(t *testing.T) corev1.Container {
	t.Helper()
	out := helmTemplate(t, "templates/deployment.yaml", "--set", "leaderElection.enabled=false")
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(out, &d); err != nil {
		t.Fatalf("the chart's Deployment: %v\n%s", err, out)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the chart's Deployment has %d containers", len(d.Spec.Template.Spec.Containers))
	}
	return d.Spec.Template.Spec.Containers[0]
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
