// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
)

// clusterWatch keeps the last state seen of one pool's NodeClaims and Nodes and of one
// workload's pods, from a watch of each, and calls observe after every change with the maps
// as they are then, so that a test can count what held at one moment rather than what a poll
// happened to see.
type clusterWatch struct {
	mu      sync.Mutex
	claims  map[string]*karpv1.NodeClaim
	nodes   map[string]*corev1.Node
	pods    map[string]*corev1.Pod
	observe func(w *clusterWatch, ev watch.EventType, obj client.Object, at time.Time)
	broken  []string
}

// watchCluster starts the watches; observe runs under the watch's lock, one event at a time.
func watchCluster(t *testing.T, pool, app string, observe func(w *clusterWatch, ev watch.EventType, obj client.Object, at time.Time)) *clusterWatch {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: env.dir}.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: env.kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w := &clusterWatch{claims: map[string]*karpv1.NodeClaim{}, nodes: map[string]*corev1.Node{}, pods: map[string]*corev1.Pod{}, observe: observe}
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	start := func(what string, list client.ObjectList, opts ...client.ListOption) {
		wi, err := wc.Watch(ctx, list, opts...)
		if err != nil {
			cancel()
			t.Fatalf("watching %s: %v", what, err)
		}
		done.Go(func() {
			defer wi.Stop()
			for ev := range wi.ResultChan() {
				if ev.Type == watch.Error {
					w.fail(fmt.Sprintf("the %s watch failed: %v", what, apierrors.FromObject(ev.Object)))
					return
				}
				w.apply(ev.Type, ev.Object.(client.Object), time.Now())
			}
			if ctx.Err() == nil {
				w.fail("the " + what + " watch ended early")
			}
		})
	}
	start("nodeclaims", &karpv1.NodeClaimList{}, client.MatchingLabels{karpv1.NodePoolLabelKey: pool})
	start("nodes", &corev1.NodeList{}, client.MatchingLabels{karpv1.NodePoolLabelKey: pool})
	start("pods", &corev1.PodList{}, client.InNamespace("default"), client.MatchingLabels{"app": app})
	t.Cleanup(func() { cancel(); done.Wait() })
	return w
}

func (w *clusterWatch) fail(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.broken = append(w.broken, msg)
}

func (w *clusterWatch) apply(ev watch.EventType, obj client.Object, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch o := obj.(type) {
	case *karpv1.NodeClaim:
		update(w.claims, o, ev)
	case *corev1.Node:
		update(w.nodes, o, ev)
	case *corev1.Pod:
		update(w.pods, o, ev)
	}
	if w.observe != nil {
		w.observe(w, ev, obj, at)
	}
}

func update[T client.Object](m map[string]T, o T, ev watch.EventType) {
	if ev == watch.Deleted {
		delete(m, o.GetName())
		return
	}
	m[o.GetName()] = o
}

// read runs f under the watch's lock, and fails the test if a watch broke: what it saw would
// have gaps.
func (w *clusterWatch) read(t *testing.T, f func()) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.broken) > 0 {
		t.Fatal(strings.Join(w.broken, "; "))
	}
	f()
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyPods lists the pods of an app that are Ready and not deleting, and those that are
// deleting.
func readyPods(ctx context.Context, app string) (ready, deleting []corev1.Pod, err error) {
	pods := &corev1.PodList{}
	if err := env.kube.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": app}); err != nil {
		return nil, nil, err
	}
	for _, p := range pods.Items {
		switch {
		case p.DeletionTimestamp != nil:
			deleting = append(deleting, p)
		case podReady(&p):
			ready = append(ready, p)
		}
	}
	return ready, deleting, nil
}

// poolClaims lists a pool's NodeClaims.
func poolClaims(t *testing.T, ctx context.Context, pool string) []karpv1.NodeClaim {
	t.Helper()
	list := &karpv1.NodeClaimList{}
	if err := env.kube.List(ctx, list, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// claimEvents lists the events on a NodeClaim with a reason.
func claimEvents(t *testing.T, ctx context.Context, claim, reason string) []corev1.Event {
	t.Helper()
	return eventsOn(t, ctx, "NodeClaim", "", claim, reason)
}

func eventsOn(t *testing.T, ctx context.Context, kind, namespace, name, reason string) []corev1.Event {
	t.Helper()
	events, err := clientset(t).CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason,
	}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return events.Items
}

// assertClaimsDestroyed waits until the Fulfillments of claims are gone, and checks that their
// machines, state Secrets and lock Leases went with them.
func assertClaimsDestroyed(t *testing.T, ctx context.Context, claims map[string]string) {
	t.Helper()
	for name, stateKey := range claims {
		eventually(t, ctx, time.Minute, "fulfillment "+name+" to be gone", func(ctx context.Context) (bool, error) {
			err := env.kube.Get(ctx, client.ObjectKey{Name: name}, &v1alpha1.Fulfillment{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		if _, err := os.Stat(filepath.Join(env.vars["SIM_DIR"], name)); !os.IsNotExist(err) {
			t.Errorf("the machine of %s is left (its state dir: %v)", name, err)
		}
		key := statelock.Key(stateKey)
		for _, obj := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.StateNamespace, Name: key.SecretName()}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.StateNamespace, Name: key.LeaseName()}},
		} {
			if err := env.kube.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				t.Errorf("the state of %s is left: %T %s (%v)", name, obj, obj.GetName(), err)
			}
		}
	}
}

// TestDriftRolloutUnderBudget: a module change drifts every node of a pool whose disruption
// budget is one node; Karpenter replaces them one at a time, each pod moving to a new node,
// and the fulfiller destroys each old machine and removes its state.
func TestDriftRolloutUnderBudget(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	const pool, app = "e2e-drift", "drift"
	np := nodePool(pool, pool)
	np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "1"}}
	startScenario(t, ctx, nodeClass(pool, nodeType("drift-node", "0.01", nil)), np)
	defer cleanup(t, app, pool, pool)
	// One pod of 1.5 cpu fits a node of 1.9 allocatable, so 3 pods make 3 nodes.
	create(t, ctx, deployment(app, pool, 3, "1500m"))
	eventually(t, ctx, 4*time.Minute, "3 pods to be Ready", func(ctx context.Context) (bool, error) {
		ready, _, err := readyPods(ctx, app)
		return len(ready) == 3, err
	})
	// A pod binds once its Node is Ready; Karpenter marks the claim Initialized a moment later.
	eventually(t, ctx, time.Minute, "3 nodeclaims to be Initialized", func(ctx context.Context) (bool, error) {
		claims := poolClaims(t, ctx, pool)
		return len(claims) == 3 && !slices.ContainsFunc(claims, func(c karpv1.NodeClaim) bool {
			return !c.StatusConditions().IsTrue(karpv1.ConditionTypeInitialized)
		}), nil
	})
	old := map[string]string{} // claim name → state key
	oldNodes := map[string]bool{}
	for _, c := range poolClaims(t, ctx, pool) {
		f := &v1alpha1.Fulfillment{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: c.Name}, f); err != nil {
			t.Fatal(err)
		}
		old[c.Name], oldNodes[c.Status.NodeName] = f.Spec.StateKey, true
	}
	if len(old) != 3 {
		t.Fatalf("%d nodeclaims for 3 pods that fit one per node, want 3", len(old))
	}

	// Karpenter's count (disruption helpers, NodePoolStatsFromNodes): an old claim consumes
	// the budget from when a disruption command marks it (its Node tainted
	// karpenter.sh/disrupted and the claim's DisruptionReason condition True) or it is deleted,
	// until its instance is terminating. Each count reads one watch, whose events come in the
	// order they happened: the claims' for Karpenter's, the Nodes' for old Nodes that still
	// exist and are tainted or deleting.
	var disrupting, maxDisrupting, maxNodes int
	drifted := map[string]string{} // old claim → its Drifted condition's reason
	w := watchCluster(t, pool, app, func(w *clusterWatch, _ watch.EventType, obj client.Object, _ time.Time) {
		switch obj.(type) {
		case *karpv1.NodeClaim:
			n := 0
			for name, c := range w.claims {
				if _, ok := old[name]; !ok {
					continue
				}
				conds := c.StatusConditions()
				if conds.IsTrue(karpv1.ConditionTypeDrifted) {
					drifted[name] = conds.Get(karpv1.ConditionTypeDrifted).Reason
				}
				if (conds.IsTrue(karpv1.ConditionTypeDisruptionReason) || c.DeletionTimestamp != nil) && !conds.IsTrue(karpv1.ConditionTypeInstanceTerminating) {
					n++
				}
			}
			disrupting, maxDisrupting = n, max(maxDisrupting, n)
		case *corev1.Node:
			n := 0
			for name, node := range w.nodes {
				if oldNodes[name] && (hasTaint(node, karpv1.DisruptedTaintKey) || node.DeletionTimestamp != nil) {
					n++
				}
			}
			maxNodes = max(maxNodes, n)
		}
	})

	nc := &v1alpha1.TofuNodeClass{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: pool}, nc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(nc.DeepCopy())
	nc.Spec.Module.Version = "e2e-2"
	if err := env.kube.Patch(ctx, nc, patch); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	eventually(t, ctx, 6*time.Minute, "every old node to be gone and 3 pods Ready on new nodes", func(ctx context.Context) (bool, error) {
		nodes := &corev1.NodeList{}
		if err := env.kube.List(ctx, nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
			return false, err
		}
		if slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool { return oldNodes[n.Name] }) {
			return false, nil
		}
		ready, deleting, err := readyPods(ctx, app)
		return len(ready) == 3 && len(deleting) == 0 && !slices.ContainsFunc(ready, func(p corev1.Pod) bool { return oldNodes[p.Spec.NodeName] }), err
	})
	took := time.Since(changed)

	w.read(t, func() {
		t.Logf("rollout of 3 nodes: old nodes gone and 3 pods Ready on new nodes %s after the module version changed; at most %d old claim(s) disrupted at once by Karpenter's count, at most %d old Node(s) tainted or deleting at once",
			took.Round(time.Second), maxDisrupting, maxNodes)
		if maxDisrupting != 1 {
			t.Errorf("at most %d old claims were disrupted at once, want 1 (the budget is one node, and every node is replaced)", maxDisrupting)
		}
		if disrupting != 0 {
			t.Errorf("%d old claims are still counted as disrupted after the rollout", disrupting)
		}
		for name := range old {
			if reason, ok := drifted[name]; !ok {
				t.Errorf("nodeclaim %s was never seen Drifted", name)
			} else if reason != "ModuleDrifted" {
				t.Errorf("nodeclaim %s drifted for %q, want ModuleDrifted (only the module's version changed)", name, reason)
			}
		}
	})
	for name := range old {
		events := claimEvents(t, ctx, name, "DisruptionTerminating")
		if !slices.ContainsFunc(events, func(e corev1.Event) bool { return strings.Contains(e.Message, "Drifted") }) {
			t.Errorf("nodeclaim %s has no DisruptionTerminating event for Drifted: %+v", name, events)
		}
	}
	eventually(t, ctx, time.Minute, "the old nodeclaims to be gone", func(ctx context.Context) (bool, error) {
		return !slices.ContainsFunc(poolClaims(t, ctx, pool), func(c karpv1.NodeClaim) bool { _, ok := old[c.Name]; return ok }), nil
	})
	assertClaimsDestroyed(t, ctx, old)
	for _, c := range poolClaims(t, ctx, pool) {
		if c.StatusConditions().IsTrue(karpv1.ConditionTypeDrifted) {
			t.Errorf("new nodeclaim %s is drifted", c.Name)
		}
	}
}

// podLife is what the watch saw of one pod of a drain.
type podLife struct {
	node             string
	evicted, gone    time.Time
	healthyAtEvicted int // the app's other pods Ready and not deleting when this one was evicted
}

// TestExpiryDrainsThroughBudget: a node reaches its pool's expireAfter and is replaced; its
// drain goes through the eviction API, so the workload's PodDisruptionBudget holds the second
// eviction until the first pod runs again elsewhere, and each pod terminates after its preStop
// hook, within its grace period. In Karpenter v1 expiry is forceful (NodePool budgets do not
// hold it); the budget that holds the drain is the PodDisruptionBudget.
func TestExpiryDrainsThroughBudget(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	const pool, app = "e2e-expiry", "expiry"
	const expireAfter, preStop, grace = 2 * time.Minute, 3 * time.Second, 30 * time.Second
	np := nodePool(pool, pool)
	np.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration(expireAfter.String())
	// Consolidation would move pods on its own; only expiry disrupts here.
	np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	startScenario(t, ctx, nodeClass(pool, nodeType("expiry-node", "0.01", nil)), np)
	defer cleanup(t, app, pool, pool)
	deploy := deployment(app, pool, 2, "800m")
	deploy.Spec.Template.Spec.TerminationGracePeriodSeconds = new(int64(grace.Seconds()))
	deploy.Spec.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{
		PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: int64(preStop.Seconds())}},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: app},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: new(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}
	create(t, ctx, pdb, deploy)
	t.Cleanup(func() { _ = env.kube.Delete(context.Background(), pdb) })
	eventually(t, ctx, 4*time.Minute, "2 pods to be Ready", func(ctx context.Context) (bool, error) {
		ready, _, err := readyPods(ctx, app)
		return len(ready) == 2, err
	})
	first, _, err := readyPods(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]string{}        // claim name → state key
	created := map[string]time.Time{} // node name → its claim's creation
	for _, c := range poolClaims(t, ctx, pool) {
		f := &v1alpha1.Fulfillment{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: c.Name}, f); err != nil {
			t.Fatal(err)
		}
		old[c.Name], created[c.Status.NodeName] = f.Spec.StateKey, c.CreationTimestamp.Time
	}

	lives := map[string]*podLife{}
	for _, p := range first {
		lives[p.Name] = &podLife{node: p.Spec.NodeName}
	}
	minHealthy, counting := len(first), false
	nodeGone := map[string]time.Time{}
	w := watchCluster(t, pool, app, func(w *clusterWatch, ev watch.EventType, obj client.Object, at time.Time) {
		switch o := obj.(type) {
		case *corev1.Pod:
			if life := lives[o.Name]; life != nil {
				if ev == watch.Deleted && life.gone.IsZero() {
					life.gone = at
				} else if o.DeletionTimestamp != nil && life.evicted.IsZero() {
					life.evicted = at
					life.healthyAtEvicted = 0
					for _, p := range w.pods {
						if p.Name != o.Name && podReady(p) {
							life.healthyAtEvicted++
						}
					}
				}
			}
			healthy := 0
			for _, p := range w.pods {
				if podReady(p) {
					healthy++
				}
			}
			// The watch's first events add the pods one by one; count from when it has them all.
			if counting = counting || healthy == len(first); counting {
				minHealthy = min(minHealthy, healthy)
			}
		case *corev1.Node:
			if _, ok := created[o.Name]; ok && ev == watch.Deleted {
				nodeGone[o.Name] = at
			}
		}
	})

	eventually(t, ctx, expireAfter+4*time.Minute, "the expired node to be gone and 2 pods Ready on its replacement", func(ctx context.Context) (bool, error) {
		nodes := &corev1.NodeList{}
		if err := env.kube.List(ctx, nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
			return false, err
		}
		if slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool { _, ok := created[n.Name]; return ok }) {
			return false, nil
		}
		ready, deleting, err := readyPods(ctx, app)
		return len(ready) == 2 && len(deleting) == 0 && !slices.ContainsFunc(ready, func(p corev1.Pod) bool { _, ok := created[p.Spec.NodeName]; return ok }), err
	})

	w.read(t, func() {
		for node, at := range created {
			gone, ok := nodeGone[node]
			if !ok {
				t.Errorf("the watch never saw node %s deleted", node)
				continue
			}
			t.Logf("node %s gone %s after its claim's creation (expireAfter %s)", node, gone.Sub(at).Round(time.Second), expireAfter)
			if gone.Sub(at) < expireAfter {
				t.Errorf("node %s went %s after its claim's creation, before its expireAfter %s", node, gone.Sub(at), expireAfter)
			}
		}
		for name, life := range lives {
			if life.evicted.IsZero() || life.gone.IsZero() {
				t.Errorf("pod %s: evicted at %v, gone at %v; the watch saw no whole termination", name, life.evicted, life.gone)
				continue
			}
			stopped := life.gone.Sub(life.evicted)
			t.Logf("pod %s: evicted with %d other pod(s) Ready, terminated %s after its eviction", name, life.healthyAtEvicted, stopped.Round(100*time.Millisecond))
			if life.healthyAtEvicted < 1 {
				t.Errorf("pod %s was evicted while no other pod of the app was Ready: the PodDisruptionBudget did not hold the drain", name)
			}
			// Our watch may see the deletion a little after the machine's kubelet does.
			if stopped < preStop-500*time.Millisecond || stopped > grace {
				t.Errorf("pod %s terminated %s after its eviction, want its preStop's %s and no more than its grace period %s", name, stopped, preStop, grace)
			}
		}
		t.Logf("fewest pods Ready at once during the drain: %d of 2", minHealthy)
		if minHealthy < 1 {
			t.Errorf("at one moment %d of 2 pods were Ready; the PodDisruptionBudget allows 1 unavailable", minHealthy)
		}
	})
	for name := range lives {
		if events := eventsOn(t, ctx, "Pod", "default", name, "Evicted"); len(events) == 0 {
			t.Errorf("pod %s has no Evicted event: it was not drained through the eviction API", name)
		}
		if events := eventsOn(t, ctx, "Pod", "default", name, "Disrupted"); len(events) != 0 {
			t.Errorf("pod %s was deleted past its PodDisruptionBudget: %s", name, events[0].Message)
		}
	}
	eventually(t, ctx, time.Minute, "the expired nodeclaims to be gone", func(ctx context.Context) (bool, error) {
		return !slices.ContainsFunc(poolClaims(t, ctx, pool), func(c karpv1.NodeClaim) bool { _, ok := old[c.Name]; return ok }), nil
	})
	assertClaimsDestroyed(t, ctx, old)
}
