// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
)

// TestFailedApplyLogOutlivesItsRunner: a failed apply's log tail stays in the Fulfillment's
// run record after its runner Job (or local run folder) is deleted: `kubectl describe` shows
// it, and `fulfiller logs` prints it, while it prints the live log of the run that goes on.
// Each apply takes a while before it fails, so the claim is still retrying when the first
// run's record is read.
func TestFailedApplyLogOutlivesItsRunner(t *testing.T) {
	ctx := ctxFor(t, 6*time.Minute)
	startScenario(t, ctx,
		nodeClass("e2e-logs", nodeType("logs-failing", "0.01", map[string]string{"apply_error": "transient", "apply_delay": "15"})),
		nodePool("e2e-logs", "e2e-logs"))
	create(t, ctx, deployment("logs", "e2e-logs", 1, "500m"))
	var claim string
	var failed v1alpha1.Run
	eventually(t, ctx, 3*time.Minute, "a failed apply with its log tail", func(ctx context.Context) (bool, error) {
		list := &v1alpha1.FulfillmentList{}
		if err := env.kube.List(ctx, list); err != nil {
			return false, err
		}
		for _, f := range list.Items {
			for _, r := range f.Status.Runs {
				if f.Spec.NodeClass == "e2e-logs" && r.Phase == v1alpha1.RunFailed && r.LogTail != "" {
					claim, failed = f.Name, r
					return true, nil
				}
			}
		}
		return false, nil
	})
	const apiError = "limit of 3600 requests per hour reached (rate_limit_exceeded)"
	if !strings.Contains(failed.LogTail, apiError) || len(failed.LogTail) > 4<<10 {
		t.Errorf("the log tail of %s (%d bytes) does not show the API's error %q:\n%s", failed.Name, len(failed.LogTail), apiError, failed.LogTail)
	}
	t.Logf("the log tail %s kept:\n%s", failed.Name, failed.LogTail)
	deleteRunner(t, ctx, failed)

	f := &v1alpha1.Fulfillment{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: claim}, f); err != nil {
		t.Fatalf("the claim %s went before its first run's record was read: %v", claim, err)
	}
	var kept *v1alpha1.Run
	for i := range f.Status.Runs {
		if f.Status.Runs[i].Name == failed.Name {
			kept = &f.Status.Runs[i]
		}
	}
	if kept == nil || kept.LogTail != failed.LogTail {
		t.Fatalf("after its runner was deleted the record of %s is %+v", failed.Name, kept)
	}
	if out := kubectl(t, "describe", "fulfillment", claim); !strings.Contains(out, "Log Tail:") || !strings.Contains(out, apiError) {
		t.Errorf("kubectl describe fulfillment %s does not show the log tail:\n%s", claim, out)
	}
	stdout, stderr, err := fulfillerLogs("--run", failed.Name, claim)
	t.Logf("fulfiller logs --run %s %s:\n%s%s", failed.Name, claim, stderr, stdout)
	if err != nil || !strings.Contains(stdout, apiError) || !strings.Contains(stderr, "the runner's log of "+failed.Name+" is gone") {
		t.Errorf("fulfiller logs --run %s %s (%v) printed:\n%s\nnoted:\n%s", failed.Name, claim, err, stdout, stderr)
	}
	// The claim's next attempt runs (or the claim was replaced, and a new one's does):
	// its live log, as the runner writes it.
	eventually(t, ctx, 2*time.Minute, "fulfiller logs to print a running apply's log", func(ctx context.Context) (bool, error) {
		list := &v1alpha1.FulfillmentList{}
		if err := env.kube.List(ctx, list); err != nil {
			return false, err
		}
		for _, f := range list.Items {
			if n := len(f.Status.Runs); f.Spec.NodeClass == "e2e-logs" && n > 0 && f.Status.Runs[n-1].Phase == v1alpha1.RunRunning && f.Status.Runs[n-1].Name != failed.Name {
				// Until its runner pod has started, its log cannot be read yet.
				stdout, _, err := fulfillerLogs(f.Name)
				if err == nil && strings.Contains(stdout, "creating simulated server "+f.Spec.NodeName) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	cleanup(t, "logs", "e2e-logs", "e2e-logs")
}

// deleteRunner deletes what a run's runner left: its Job and pods (background deletion, as
// the Job's TTL does), or a local run's folder.
func deleteRunner(t *testing.T, ctx context.Context, run v1alpha1.Run) {
	t.Helper()
	if env.executor != devenv.ExecutorJob {
		if err := os.RemoveAll(filepath.Dir(run.Log)); err != nil {
			t.Fatal(err)
		}
		return
	}
	kubectl(t, "-n", devenv.Namespace, "delete", "job", run.Name, "--cascade=background", "--wait=true")
	eventually(t, ctx, time.Minute, "the pods of Job "+run.Name+" to be gone", func(ctx context.Context) (bool, error) {
		pods, err := clientset(t).CoreV1().Pods(devenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + run.Name})
		return err == nil && len(pods.Items) == 0, err
	})
}

// fulfillerLogs runs `fulfiller logs ARGS` against the environment's cluster.
func fulfillerLogs(args ...string) (string, string, error) {
	cmd := exec.Command(env.bin, append([]string{"logs", "--kubeconfig", devenv.Layout{Dir: env.dir}.Kubeconfig(), "-n", devenv.Namespace}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}
