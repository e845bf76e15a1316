// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/utils/resources"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// poolWatch is a clusterWatch of one pool that also keeps every claim name it ever saw and
// the first time each was seen deleting, and wakes waitFor after each change.
type poolWatch struct {
	*clusterWatch
	created  map[string]time.Time // every claim seen, with when it was first seen
	deleting map[string]time.Time
	changed  chan struct{}
}

func watchPool(t *testing.T, pool, app string) *poolWatch {
	t.Helper()
	p := &poolWatch{created: map[string]time.Time{}, deleting: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	p.clusterWatch = watchCluster(t, pool, app, func(_ *clusterWatch, _ watch.EventType, obj client.Object, at time.Time) {
		if c, ok := obj.(*karpv1.NodeClaim); ok {
			if _, seen := p.created[c.Name]; !seen {
				p.created[c.Name] = at
			}
			if _, seen := p.deleting[c.Name]; !seen && c.DeletionTimestamp != nil {
				p.deleting[c.Name] = at
			}
		}
		select {
		case p.changed <- struct{}{}:
		default:
		}
	})
	return p
}

// waitFor waits until cond, run under the watch's lock, holds; it is checked after every
// change the watches report.
func (p *poolWatch) waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var ok bool
		p.read(t, func() { ok = cond() })
		if ok {
			return
		}
		select {
		case <-p.changed:
		case <-ctx.Done():
			var state []string
			p.read(t, func() { state = p.describe() })
			t.Fatalf("timed out after %s waiting for %s; claims: %s", timeout, what, strings.Join(state, ", "))
		}
	}
}

// readyClaims are the pool's claims that are Ready (launched, registered, initialized), not
// deleting, and whose Node is Ready. Call it under the watch's lock.
func (p *poolWatch) readyClaims() []string {
	var ready []string
	for name, c := range p.claims {
		if c.DeletionTimestamp != nil || !c.StatusConditions().IsTrue(karpv1.ConditionTypeInitialized) || !c.StatusConditions().IsTrue("Ready") {
			continue
		}
		if n := p.nodes[c.Status.NodeName]; n != nil && nodeReady(n) {
			ready = append(ready, name)
		}
	}
	slices.Sort(ready)
	return ready
}

func (p *poolWatch) describe() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(p.claims)) {
		c := p.claims[name]
		out = append(out, fmt.Sprintf("%s (node %q, initialized %v, deleting %v)", name, c.Status.NodeName,
			c.StatusConditions().IsTrue(karpv1.ConditionTypeInitialized), c.DeletionTimestamp != nil))
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyFulfillments waits until each claim's Fulfillment is Ready (it follows the claim's
// Initialized condition a moment later) and returns their state keys.
func readyFulfillments(t *testing.T, ctx context.Context, claims []string) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, name := range claims {
		eventually(t, ctx, time.Minute, "fulfillment "+name+" to be Ready", func(ctx context.Context) (bool, error) {
			f := &v1alpha1.Fulfillment{}
			if err := env.kube.Get(ctx, client.ObjectKey{Name: name}, f); err != nil {
				return false, err
			}
			keys[name] = f.Spec.StateKey
			return f.StatusConditions().Root().IsTrue(), nil
		})
	}
	return keys
}

// scaleNodePool sets a static NodePool's replicas through its scale subresource, as
// `kubectl scale` does.
func scaleNodePool(t *testing.T, pool string, replicas int) {
	t.Helper()
	kubectl(t, "scale", "nodepool/"+pool, fmt.Sprintf("--replicas=%d", replicas))
}

// TestStaticNodePool: a static NodePool (spec.replicas, Karpenter's StaticCapacity gate) with
// no pods gets its 2 nodes through the fulfiller, and keeps them although they are empty and
// the pool's consolidation policy would remove empty nodes (Karpenter ignores it for static
// pools). Scaled to 3 it gets a third; scaled to 1, Karpenter deletes two claims, and the
// fulfiller destroys their machines and removes their Fulfillments and state.
func TestStaticNodePool(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	const class, pool = "e2e-static", "e2e-static"
	np := nodePool(pool, class)
	np.Spec.Replicas = new(int64(2))
	w := watchPool(t, pool, "static-none")
	start := time.Now()
	startScenario(t, ctx, nodeClass(class, nodeType("static-node", "0.01", nil)), np)
	defer cleanup(t, "", pool, class)

	w.waitFor(t, ctx, 4*time.Minute, "2 Ready claims", func() bool { return len(w.readyClaims()) == 2 })
	var two []string
	w.read(t, func() {
		two = w.readyClaims()
		t.Logf("2 claims Ready %s after the pool's creation: %v", time.Since(start).Round(time.Second), two)
	})
	readyFulfillments(t, ctx, two)

	scaleNodePool(t, pool, 3)
	scaled := time.Now()
	w.waitFor(t, ctx, 4*time.Minute, "3 Ready claims", func() bool { return len(w.readyClaims()) == 3 })
	var three []string
	w.read(t, func() {
		three = w.readyClaims()
		t.Logf("3 claims Ready %s after the scale to 3", time.Since(scaled).Round(time.Second))
		if len(w.created) != 3 {
			t.Errorf("the pool had %d claims, want 3: %v", len(w.created), slices.Sorted(maps.Keys(w.created)))
		}
		if len(w.deleting) > 0 {
			t.Errorf("claims of the static pool were deleted before its scale-down (consolidation of empty nodes?): %v", w.deleting)
		}
	})
	for _, name := range two {
		if !slices.Contains(three, name) {
			t.Errorf("claim %s of the first 2 is not among the 3: %v", name, three)
		}
	}
	stateKeys := readyFulfillments(t, ctx, three)

	scaleNodePool(t, pool, 1)
	scaled = time.Now()
	w.waitFor(t, ctx, 4*time.Minute, "1 claim and 1 Node left", func() bool {
		return len(w.claims) == 1 && len(w.nodes) == 1 && len(w.readyClaims()) == 1
	})
	var kept string
	w.read(t, func() {
		kept = w.readyClaims()[0]
		t.Logf("scaled to 1: 2 claims and their Nodes gone %s after the scale to 1; %s kept", time.Since(scaled).Round(time.Second), kept)
		if len(w.created) != 3 {
			t.Errorf("the pool had %d claims, want 3 (none replaced): %v", len(w.created), slices.Sorted(maps.Keys(w.created)))
		}
	})
	delete(stateKeys, kept)
	if len(stateKeys) != 2 {
		t.Fatalf("the kept claim %s is not one of the 3: %v", kept, three)
	}
	assertClaimsDestroyed(t, ctx, stateKeys)
}

// limitMessage is what Karpenter's scheduler says when a pool's limits.nodes leaves no room
// for another node (core v1.15.0, pkg/controllers/provisioning/scheduling/scheduler.go), in
// its FailedScheduling event on the pod: "Failed to schedule pod, ...".
const limitMessage = "node limits have been exhausted for nodepool"

// TestLimitNodesHoldsPending: a dynamic NodePool with limits.nodes 1 and 2 pods of which only
// one fits a node gets one node; the other pod stays Pending with Karpenter's
// FailedScheduling event naming the limit, and no second claim is created over several of
// Karpenter's scheduling passes. Raising the limit to 2 gets the second node and the pod
// Ready on it.
func TestLimitNodesHoldsPending(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	const class, pool, app = "e2e-limit", "e2e-limit", "limit"
	np := nodePool(pool, class)
	np.Spec.Limits = karpv1.Limits{resources.Node: resource.MustParse("1")}
	startScenario(t, ctx, nodeClass(class, nodeType("limit-node", "0.01", nil)), np)
	defer cleanup(t, app, pool, class)
	w := watchPool(t, pool, app)
	// One pod of 1.5 cpu fits a node of 1.9 allocatable, two do not. The second pod comes
	// once the first node is there: within one scheduling pass Karpenter counts limits.nodes
	// only against the nodes that exist, so two pods of one batch would get two claims (see
	// docs/karpenter-features.md).
	create(t, ctx, deployment(app, pool, 1, "1500m"))
	w.waitFor(t, ctx, 4*time.Minute, "1 Ready claim and its pod Ready", func() bool {
		ready := 0
		for _, p := range w.pods {
			if podReady(p) {
				ready++
			}
		}
		return len(w.readyClaims()) == 1 && ready == 1
	})
	scale(t, ctx, app, 2)
	scaledUp := time.Now()

	var pending string
	w.waitFor(t, ctx, 4*time.Minute, "1 Ready claim, 1 pod Ready and 1 Pending", func() bool {
		var ready, unbound []string
		for name, p := range w.pods {
			switch {
			case podReady(p):
				ready = append(ready, name)
			case p.Spec.NodeName == "" && p.DeletionTimestamp == nil:
				unbound = append(unbound, name)
			}
		}
		if len(w.readyClaims()) != 1 || len(ready) != 1 || len(unbound) != 1 {
			return false
		}
		pending = unbound[0]
		return true
	})
	t.Logf("1 node and 1 pod Ready, %s Pending %s after the scale to 2", pending, time.Since(scaledUp).Round(time.Second))

	// The kube-scheduler's FailedScheduling events on the pod do not start so.
	ev := waitEvent(t, ctx, 2*time.Minute, pending, "FailedScheduling", func(e *corev1.Event) bool {
		return strings.HasPrefix(e.Message, "Failed to schedule pod, ") && strings.Contains(e.Message, limitMessage) && strings.Contains(e.Message, pool)
	})
	t.Logf("Karpenter's event on %s, %s after the scale to 2: %s %q", pending, ev.LastTimestamp.Sub(scaledUp).Round(time.Second), ev.Reason, ev.Message)

	// Karpenter's pod controller asks for a scheduling pass about every 10 s while a pod is
	// Pending; two more passes after the event, each counted when it ends, saw the limit too.
	passes := func() float64 {
		v, _ := sumOf(scrape(t), "karpenter_scheduler_scheduling_duration_seconds_count", `controller="provisioner"`)
		return v
	}
	counted := passes()
	eventually(t, ctx, time.Minute, "two more scheduling passes of Karpenter's provisioner", func(context.Context) (bool, error) {
		return passes() >= counted+2, nil
	})
	var first string
	w.read(t, func() {
		if len(w.created) != 1 {
			t.Fatalf("the pool had %d claims while limits.nodes was 1, want 1: %v", len(w.created), slices.Sorted(maps.Keys(w.created)))
		}
		first = slices.Collect(maps.Keys(w.created))[0]
		p := w.pods[pending]
		if p == nil || p.Spec.NodeName != "" {
			t.Fatalf("pod %s is no longer Pending while the limit holds: %v", pending, p)
		}
	})

	// Raised: the limit allows 2 nodes.
	got := &karpv1.NodePool{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: pool}, got); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Limits = karpv1.Limits{resources.Node: resource.MustParse("2")}
	if err := env.kube.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	w.waitFor(t, ctx, 4*time.Minute, "2 Ready claims and 2 pods Ready", func() bool {
		ready := 0
		for _, p := range w.pods {
			if podReady(p) {
				ready++
			}
		}
		return len(w.readyClaims()) == 2 && ready == 2
	})
	w.read(t, func() {
		t.Logf("raised: 2 nodes and 2 pods Ready %s after the limit was raised to 2", time.Since(raised).Round(time.Second))
		if len(w.created) != 2 || len(w.deleting) > 0 {
			t.Errorf("the pool had claims %v (deleting %v), want %s and one more, none deleted", slices.Sorted(maps.Keys(w.created)), w.deleting, first)
		}
		if p := w.pods[pending]; p == nil || !podReady(p) || p.Spec.NodeName == w.claims[first].Status.NodeName {
			t.Errorf("pod %s is not Ready on the second node: %v", pending, p)
		}
	})
}

// waitEvent waits, with a list and then a watch, for an event on an object in the default
// namespace with a reason that matches.
func waitEvent(t *testing.T, ctx context.Context, timeout time.Duration, name, reason string, match func(*corev1.Event) bool) *corev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	selector := fields.Set{"involvedObject.name": name, "reason": reason}.AsSelector()
	lw := cache.NewListWatchFromClient(clientset(t).CoreV1().RESTClient(), "events", "default", selector)
	var seen []string
	ev, err := watchtools.UntilWithSync(ctx, lw, &corev1.Event{}, nil, func(ev watch.Event) (bool, error) {
		e, ok := ev.Object.(*corev1.Event)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		seen = append(seen, e.Message)
		return match(e), nil
	})
	if err != nil {
		t.Fatalf("waiting for a %s event on %s: %v; seen: %q", reason, name, err, seen)
	}
	return ev.Object.(*corev1.Event)
}
