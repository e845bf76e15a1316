// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// TestRepairReplacesNotReadyNode: a simulated machine's kubelet reports Ready=False (an
// injected condition); past the repair toleration (devenv.RepairToleration, with Karpenter's
// NodeRepair gate on) Karpenter replaces the node for Unhealthy, its pod moves to the
// replacement, and the fulfiller destroys the old machine and removes its state.
func TestRepairReplacesNotReadyNode(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	const pool, app = "e2e-repair", "repair"
	startScenario(t, ctx, nodeClass(pool, nodeType("repair-node", "0.01", nil)), nodePool(pool, pool))
	defer cleanup(t, app, pool, pool)
	create(t, ctx, deployment(app, pool, 1, "500m"))
	eventually(t, ctx, 4*time.Minute, "the pod to be Ready", func(ctx context.Context) (bool, error) {
		ready, _, err := readyPods(ctx, app)
		return len(ready) == 1, err
	})
	eventually(t, ctx, time.Minute, "one Initialized nodeclaim", func(ctx context.Context) (bool, error) {
		claims := poolClaims(t, ctx, pool)
		return len(claims) == 1 && claims[0].StatusConditions().IsTrue(karpv1.ConditionTypeInitialized), nil
	})
	oldClaim := poolClaims(t, ctx, pool)[0]
	f := &v1alpha1.Fulfillment{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: oldClaim.Name}, f); err != nil {
		t.Fatal(err)
	}
	old := map[string]string{oldClaim.Name: f.Spec.StateKey}

	var oldDeleted, replacementCreated time.Time
	var replacement string
	w := watchCluster(t, pool, app, func(w *clusterWatch, ev watch.EventType, obj client.Object, at time.Time) {
		c, ok := obj.(*karpv1.NodeClaim)
		if !ok {
			return
		}
		if c.Name == oldClaim.Name {
			if c.DeletionTimestamp != nil && oldDeleted.IsZero() {
				oldDeleted = at
			}
		} else if replacement == "" {
			replacement, replacementCreated = c.Name, at
		}
	})

	if err := sim.InjectConditions(filepath.Join(env.vars["SIM_DIR"], oldClaim.Name), []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "injected by the e2e test",
	}}); err != nil {
		t.Fatal(err)
	}
	var notReadySince time.Time
	eventually(t, ctx, time.Minute, "the node to report Ready=False", func(ctx context.Context) (bool, error) {
		node := &corev1.Node{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: oldClaim.Status.NodeName}, node); err != nil {
			return false, err
		}
		i := slices.IndexFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
		if i < 0 || node.Status.Conditions[i].Status != corev1.ConditionFalse {
			return false, nil
		}
		notReadySince = node.Status.Conditions[i].LastTransitionTime.Time
		return true, nil
	})
	eventually(t, ctx, 4*time.Minute, "the NotReady node to be gone and the pod Ready on its replacement", func(ctx context.Context) (bool, error) {
		nodes := &corev1.NodeList{}
		if err := env.kube.List(ctx, nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
			return false, err
		}
		if slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool { return n.Name == oldClaim.Status.NodeName }) {
			return false, nil
		}
		ready, deleting, err := readyPods(ctx, app)
		return len(ready) == 1 && len(deleting) == 0, err
	})
	took := time.Since(notReadySince)

	w.read(t, func() {
		t.Logf("repair: the node NotReady since %s, its claim deleted %s after that, the replacement %s seen %s after it; old node gone and the pod Ready %s after it (toleration %s)",
			notReadySince.Format(time.TimeOnly), oldDeleted.Sub(notReadySince).Round(time.Second), replacement,
			replacementCreated.Sub(notReadySince).Round(time.Second), took.Round(time.Second), devenv.RepairToleration)
		switch {
		case oldDeleted.IsZero():
			t.Error("the watch never saw the old claim deleted")
		case oldDeleted.Sub(notReadySince) < devenv.RepairToleration-time.Second:
			// The condition's transition time has the API server's whole seconds.
			t.Errorf("the claim was deleted %s after its node went NotReady, before the toleration %s", oldDeleted.Sub(notReadySince), devenv.RepairToleration)
		}
		if replacement == "" {
			t.Error("no replacement claim")
		}
	})
	events := claimEvents(t, ctx, oldClaim.Name, "DisruptionTerminating")
	if !slices.ContainsFunc(events, func(e corev1.Event) bool { return strings.Contains(e.Message, "Unhealthy") }) {
		t.Errorf("nodeclaim %s has no DisruptionTerminating event for Unhealthy: %+v", oldClaim.Name, events)
	}
	ready, _, err := readyPods(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 1 || ready[0].Spec.NodeName == oldClaim.Status.NodeName {
		t.Errorf("the pod is not on a new node: %v", ready)
	}
	assertClaimsDestroyed(t, ctx, old)
}
