// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// claimHold is what a watch of one pool saw of the claim a test expects to be held.
type claimHold struct {
	claim     string
	disrupted time.Time // first seen with DisruptionReason True or deleting
	deleting  time.Time // first seen deleting
	replaced  string    // another claim of the pool, the first one seen
	created   time.Time // when the watch first saw it
}

// watchHold watches a pool's claims for disruption of one claim and the launch of another.
func watchHold(t *testing.T, pool, app, claim string) (*clusterWatch, *claimHold) {
	t.Helper()
	h := &claimHold{claim: claim}
	w := watchCluster(t, pool, app, func(_ *clusterWatch, _ watch.EventType, obj client.Object, at time.Time) {
		c, ok := obj.(*karpv1.NodeClaim)
		if !ok {
			return
		}
		switch {
		case c.Name == h.claim:
			if h.disrupted.IsZero() && (c.DeletionTimestamp != nil || c.StatusConditions().IsTrue(karpv1.ConditionTypeDisruptionReason)) {
				h.disrupted = at
			}
			if h.deleting.IsZero() && c.DeletionTimestamp != nil {
				h.deleting = at
			}
		case h.replaced == "":
			h.replaced, h.created = c.Name, at
		}
	})
	return w, h
}

// largeClaim waits until a pool has one Initialized claim, checks it is of the large type, and
// returns it with its state key.
func largeClaim(t *testing.T, ctx context.Context, pool, large string) (karpv1.NodeClaim, string) {
	t.Helper()
	eventually(t, ctx, time.Minute, "one Initialized nodeclaim in "+pool, func(ctx context.Context) (bool, error) {
		claims := poolClaims(t, ctx, pool)
		return len(claims) == 1 && claims[0].StatusConditions().IsTrue(karpv1.ConditionTypeInitialized), nil
	})
	c := poolClaims(t, ctx, pool)[0]
	if got := c.Labels[corev1.LabelInstanceTypeStable]; got != large {
		t.Fatalf("the 3 pods of %s got a node of type %q, want %q", pool, got, large)
	}
	f := &v1alpha1.Fulfillment{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: c.Name}, f); err != nil {
		t.Fatal(err)
	}
	return c, f.Spec.StateKey
}

// waitBlocked waits for Karpenter's DisruptionBlocked event on a claim whose message says why,
// and for the claim to be Consolidatable (its pods unchanged for consolidateAfter), so that
// consolidation is what is held. Karpenter capitalises the message's first letter
// (pretty.Sentence), so the match ignores case. Its recorder publishes one DisruptionBlocked
// event per claim every 2 minutes at most, whatever the message (core v1.15.0, pkg/events: the
// dedupe key is the reason and the claim's UID): if its disruption loop saw the claim before
// its Node was initialized ("Node isn't initialized"), this one comes up to 2 minutes later.
func waitBlocked(t *testing.T, ctx context.Context, claim, why string) corev1.Event {
	t.Helper()
	var got corev1.Event
	eventually(t, ctx, 3*time.Minute, "a DisruptionBlocked event on "+claim+" for "+why, func(ctx context.Context) (bool, error) {
		events := claimEvents(t, ctx, claim, "DisruptionBlocked")
		i := slices.IndexFunc(events, func(e corev1.Event) bool {
			return strings.Contains(strings.ToLower(e.Message), strings.ToLower(why))
		})
		if i < 0 {
			return false, nil
		}
		got = events[i]
		return true, nil
	})
	eventually(t, ctx, time.Minute, "nodeclaim "+claim+" to be Consolidatable", func(ctx context.Context) (bool, error) {
		c := &karpv1.NodeClaim{}
		err := env.kube.Get(ctx, client.ObjectKey{Name: claim}, c)
		return err == nil && c.StatusConditions().IsTrue(karpv1.ConditionTypeConsolidatable), err
	})
	return got
}

// TestConsolidationReplacesWithCheaper: two pools of a large type and a cheaper small one, each
// with a workload of 3 pods on one large node that shrinks to 1 pod, which fits the small
// type. In one pool a pod's karpenter.sh/do-not-disrupt annotation keeps the node; in the
// other a PodDisruptionBudget that allows no disruption holds the consolidation, each with
// Karpenter's DisruptionBlocked event, and a consolidation pass of Karpenter's after both are
// Consolidatable finds neither eligible. Once the budget allows one pod unavailable, Karpenter
// replaces that node with a small one (the replacement launched before the old claim is
// deleted, the pod moved) instead of only deleting it, and the fulfiller destroys the old
// machine and removes its state; the do-not-disrupt node is still there after that.
//
// The holds are on two claims because Karpenter's DisruptionBlocked events of one claim come
// 2 minutes apart (see waitBlocked).
func TestConsolidationReplacesWithCheaper(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	const class, small = "e2e-consolidate", "consolidate-small"
	const pool, app = "e2e-consolidate", "consolidate"
	const keepPool, keepApp = "e2e-consolidate-keep", "consolidate-keep"
	large := nodeType("consolidate-large", "0.025", map[string]string{"cpu": "4"})
	large.Capacity[corev1.ResourceCPU] = resource.MustParse("4")
	startScenario(t, ctx, nodeClass(class, nodeType(small, "0.01", nil), large), nodePool(pool, class))
	defer cleanup(t, app, pool, class)
	create(t, ctx, nodePool(keepPool, class))
	// Runs before cleanup: its wait for every claim to be destroyed covers this pool's too.
	defer func() {
		bg := context.Background()
		_ = env.kube.Delete(bg, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: keepApp}})
		_ = env.kube.Delete(bg, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: keepPool}})
	}()

	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: app},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: new(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}
	keep := deployment(keepApp, keepPool, 3, "1")
	keep.Spec.Template.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
	// Three pods of 1 cpu fit one large node (3.9 allocatable, 0.025) for less than three
	// small ones (1.9 allocatable each, 0.03 together); one pod fits a small one (0.01).
	create(t, ctx, pdb, deployment(app, pool, 3, "1"), keep)
	t.Cleanup(func() { _ = env.kube.Delete(context.Background(), pdb) })
	for _, a := range []string{app, keepApp} {
		eventually(t, ctx, 4*time.Minute, "3 pods of "+a+" to be Ready", func(ctx context.Context) (bool, error) {
			ready, _, err := readyPods(ctx, a)
			return len(ready) == 3, err
		})
	}
	oldClaim, stateKey := largeClaim(t, ctx, pool, large.Name)
	keepClaim, _ := largeClaim(t, ctx, keepPool, large.Name)
	w, held := watchHold(t, pool, app, oldClaim.Name)
	kw, kept := watchHold(t, keepPool, keepApp, keepClaim.Name)

	scale(t, ctx, app, 1)
	scale(t, ctx, keepApp, 1)
	for _, a := range []string{app, keepApp} {
		eventually(t, ctx, time.Minute, "1 pod of "+a+" left", func(ctx context.Context) (bool, error) {
			ready, deleting, err := readyPods(ctx, a)
			return len(ready) == 1 && len(deleting) == 0, err
		})
	}
	shrunk := time.Now()
	eventually(t, ctx, time.Minute, "the PodDisruptionBudget to allow no disruption of the pod left", func(ctx context.Context) (bool, error) {
		got := &policyv1.PodDisruptionBudget{}
		err := env.kube.Get(ctx, client.ObjectKeyFromObject(pdb), got)
		return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.ExpectedPods == 1 && got.Status.DisruptionsAllowed == 0, err
	})
	// Karpenter's messages: `pod has "karpenter.sh/do-not-disrupt" annotation`, `pdb prevents
	// pod evictions` (pkg/controllers/state/statenode.go).
	keepEvent := waitBlocked(t, ctx, keepClaim.Name, `pod has "`+karpv1.DoNotDisruptAnnotationKey+`" annotation`)
	pdbEvent := waitBlocked(t, ctx, oldClaim.Name, "pdb prevents pod evictions")
	t.Logf("held: DisruptionBlocked %q on %s and %q on %s, %s and %s after the claims' creation, %s after the scale-down",
		keepEvent.Message, keepClaim.Name, pdbEvent.Message, oldClaim.Name,
		keepEvent.FirstTimestamp.Sub(keepClaim.CreationTimestamp.Time).Round(time.Second),
		pdbEvent.FirstTimestamp.Sub(oldClaim.CreationTimestamp.Time).Round(time.Second), time.Since(shrunk).Round(time.Second))
	// A whole consolidation pass of Karpenter's after both claims were Consolidatable found
	// neither eligible. Its disruption loop runs the methods one after the other, about every
	// 10 s; each evaluation is counted when it ends, so the second one counted from here began
	// after this point.
	passes := func() float64 {
		v, _ := sumOf(scrape(t), "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count", `consolidation_type="single"`)
		return v
	}
	counted := passes()
	eventually(t, ctx, time.Minute, "two more single-node consolidation evaluations of Karpenter's", func(context.Context) (bool, error) {
		return passes() >= counted+2, nil
	})
	if v, n := sumOf(scrape(t), "karpenter_voluntary_disruption_eligible_nodes", `reason="underutilized"`); n != 1 || v != 0 {
		t.Errorf("Karpenter counts %v nodes (%d series) eligible for consolidation, want 0 while both are held", v, n)
	}
	w.read(t, func() {
		if !held.disrupted.IsZero() || held.replaced != "" {
			t.Fatalf("nodeclaim %s was disrupted (%v) or replaced (%q) while its PodDisruptionBudget allowed no disruption", oldClaim.Name, held.disrupted, held.replaced)
		}
	})

	// Released: the budget allows one pod unavailable.
	got := &policyv1.PodDisruptionBudget{}
	if err := env.kube.Get(ctx, client.ObjectKeyFromObject(pdb), got); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.MaxUnavailable = new(intstr.FromInt32(1))
	if err := env.kube.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	eventually(t, ctx, 4*time.Minute, "the large node to be gone and the pod Ready on a small one", func(ctx context.Context) (bool, error) {
		node := &corev1.Node{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: oldClaim.Status.NodeName}, node); !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		ready, deleting, err := readyPods(ctx, app)
		return len(ready) == 1 && len(deleting) == 0 && ready[0].Spec.NodeName != oldClaim.Status.NodeName, err
	})
	took := time.Since(released)

	var replacement string
	w.read(t, func() {
		replacement = held.replaced
		t.Logf("replaced: the large node gone and the pod Ready on the replacement %s %s after the budget allowed it; the replacement seen %s after, the old claim disrupted %s and deleted %s after",
			replacement, took.Round(time.Second), held.created.Sub(released).Round(time.Second), held.disrupted.Sub(released).Round(time.Second), held.deleting.Sub(released).Round(time.Second))
		switch {
		case replacement == "":
			t.Fatal("no replacement claim: the node was deleted, not replaced")
		case held.disrupted.IsZero():
			t.Error("the watch never saw the old claim disrupted")
		case held.deleting.IsZero():
			t.Error("the watch never saw the old claim deleted")
		case !held.created.Before(held.deleting):
			t.Errorf("the replacement claim came %s after the old claim's deletion; want it launched first", held.created.Sub(held.deleting))
		}
	})
	events := claimEvents(t, ctx, oldClaim.Name, "DisruptionTerminating")
	if !slices.ContainsFunc(events, func(e corev1.Event) bool {
		return strings.Contains(e.Message, string(karpv1.DisruptionReasonUnderutilized))
	}) {
		t.Errorf("nodeclaim %s has no DisruptionTerminating event for Underutilized: %+v", oldClaim.Name, events)
	}
	eventually(t, ctx, time.Minute, "only the replacement left in "+pool, func(ctx context.Context) (bool, error) {
		claims := poolClaims(t, ctx, pool)
		return len(claims) == 1 && claims[0].Name == replacement, nil
	})
	now := poolClaims(t, ctx, pool)[0]
	if got := now.Labels[corev1.LabelInstanceTypeStable]; got != small {
		t.Errorf("the replacement is of type %q, want %s", got, small)
	}
	ready, _, err := readyPods(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 1 || ready[0].Spec.NodeName != now.Status.NodeName {
		t.Errorf("the pod is not on the replacement's node %s: %v", now.Status.NodeName, ready)
	}
	assertClaimsDestroyed(t, ctx, map[string]string{oldClaim.Name: stateKey})

	// The do-not-disrupt node was Consolidatable as long as the other one, and is still there.
	kw.read(t, func() {
		t.Logf("kept: nodeclaim %s still there %s after the scale-down", keepClaim.Name, time.Since(shrunk).Round(time.Second))
		if !kept.disrupted.IsZero() || kept.replaced != "" {
			t.Errorf("nodeclaim %s was disrupted (%v) or replaced (%q) although a pod on it has %s", keepClaim.Name, kept.disrupted, kept.replaced, karpv1.DoNotDisruptAnnotationKey)
		}
		c := kw.claims[keepClaim.Name]
		if c == nil || !c.StatusConditions().IsTrue(karpv1.ConditionTypeConsolidatable) {
			t.Errorf("nodeclaim %s is gone or not Consolidatable: %v", keepClaim.Name, c)
		}
	})
}
