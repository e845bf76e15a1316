// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/proc"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/kubelet"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// TestKilledRunnerLockIsRecovered kills a runner while its tofu apply holds the claim's state
// lock, as a node crash or the OOM killer would. The kubernetes backend's Lease never
// expires, so the lock stays; the controller proves the runner gone, releases the lock (event
// StaleLockRecovered), and the retried apply completes the claim with exactly one machine.
func TestKilledRunnerLockIsRecovered(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	startScenario(t, ctx,
		nodeClass("e2e-kill", nodeType("kill", "0.01", map[string]string{"apply_delay": "30"})),
		nodePool("e2e-kill", "e2e-kill"))
	create(t, ctx, deployment("kill", "e2e-kill", 1, "500m"))

	var f v1alpha1.Fulfillment
	var holder *statelock.Holder
	eventually(t, ctx, 2*time.Minute, "an apply to hold its state lock", func(ctx context.Context) (bool, error) {
		ffs := fulfillments(t, ctx)
		if len(ffs) != 1 || len(ffs[0].Status.Runs) == 0 || ffs[0].Status.Runs[0].Phase != v1alpha1.RunRunning {
			return false, nil
		}
		f = ffs[0]
		var err error
		holder, err = statelock.LockHolder(ctx, env.kube, devenv.StateNamespace, statelock.Key(f.Spec.StateKey))
		return holder != nil, err
	})
	killed := f.Status.Runs[0].Name
	killRunner(t, ctx, killed)
	t.Logf("killed run %s holding lock %s (%s)", killed, holder.ID, holder.Who)

	eventually(t, ctx, 4*time.Minute, "the pod to be bound after the runner was killed", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "kill"}, 1)
	})
	// The machine joins while its apply writes the state and its runner reports: the run's
	// end reaches the Fulfillment after the pod may be bound.
	var first, last *v1alpha1.Run
	eventually(t, ctx, time.Minute, "a later apply to succeed", func(ctx context.Context) (bool, error) {
		if err := env.kube.Get(ctx, client.ObjectKeyFromObject(&f), &f); err != nil {
			return false, err
		}
		first, last = nil, nil
		for i := range f.Status.Runs {
			if f.Status.Runs[i].Operation == string(tfrunner.Apply) {
				if first == nil {
					first = &f.Status.Runs[i]
				}
				last = &f.Status.Runs[i]
			}
		}
		return last != first && last.Phase != v1alpha1.RunRunning, nil
	})
	if first.Name != killed || first.Phase != v1alpha1.RunFailed {
		t.Errorf("the killed run: %+v", first)
	}
	if last.Phase != v1alpha1.RunSucceeded {
		t.Errorf("no later apply succeeded: %+v", f.Status.Runs)
	}
	if f.Status.LockHolder != nil {
		t.Errorf("lock holder still shown: %+v", f.Status.LockHolder)
	}
	// The lock was released by the fulfiller, not by anyone else, and said so. Events are
	// recorded after the status write that they follow, and reach the API server
	// asynchronously: the run's end may be seen before its event.
	eventually(t, ctx, time.Minute, "a StaleLockRecovered event naming lock "+holder.ID, func(ctx context.Context) (bool, error) {
		events := &corev1.EventList{}
		if err := env.kube.List(ctx, events, client.MatchingFields{"involvedObject.name": f.Name}); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "StaleLockRecovered" && strings.Contains(e.Message, holder.ID) {
				return true, nil
			}
		}
		return false, nil
	})
	// Exactly one machine: one simulated server and one Node for the claim.
	machines, err := os.ReadDir(env.vars["SIM_DIR"])
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range machines {
		names = append(names, m.Name())
	}
	if len(names) != 1 || names[0] != f.Spec.NodeName {
		t.Errorf("machines %v, want exactly [%s]", names, f.Spec.NodeName)
	}
	nodes := &corev1.NodeList{}
	if err := env.kube.List(ctx, nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: "e2e-kill"}); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 {
		t.Errorf("%d nodes for one claim", len(nodes.Items))
	}
	cleanup(t, "kill", "e2e-kill", "e2e-kill")
}

// killRunner kills a run's runner and all it started (tofu and its provisioners) at once:
// the runner pod's container through the stand-in kubelet, or a local run's session.
func killRunner(t *testing.T, ctx context.Context, run string) {
	t.Helper()
	if err := killRun(ctx, clientset(t), run); err != nil {
		t.Fatal(err)
	}
}

// killRun is killRunner for any goroutine: it returns what went wrong.
func killRun(ctx context.Context, cs kubernetes.Interface, run string) error {
	if env.executor == devenv.ExecutorJob {
		pods, err := cs.CoreV1().Pods(devenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + run})
		if err != nil {
			return fmt.Errorf("pods of run %s: %w", run, err)
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("run %s has %d pods, want 1", run, len(pods.Items))
		}
		return kubelet.KillContainer(devenv.Layout{Dir: env.dir}.Kubelet(), &pods.Items[0])
	}
	pid, ok := proc.ReadPIDFile(filepath.Join(devenv.Layout{Dir: env.dir}.Runs(), run, executor.PIDFileName))
	if !ok {
		return fmt.Errorf("run %s has no pid file", run)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing run %s: %w", run, err)
	}
	return nil
}
