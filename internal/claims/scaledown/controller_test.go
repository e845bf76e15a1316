// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package scaledown

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

var controlPlane *testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, &controlPlane, testenv.Options{CRDs: testenv.DefaultCRDs()}))
}

// applied is when the claims' machines were made: the start of their first paid hour. It is
// the next full hour, so that the claims' creation (the API server's time) comes before it,
// as it does for a real claim: Karpenter counts expireAfter from there.
var applied = time.Now().UTC().Truncate(time.Hour).Add(time.Hour)

// at is the time d after applied as the fulfiller writes it.
func at(d time.Duration) string { return applied.Add(d).Format(time.RFC3339) }

// hourly is a family that bills by the started hour, as Hetzner Cloud does.
type hourly struct{}

func (hourly) Name() string                 { return v1alpha1.FamilyHcloud }
func (hourly) BillingPeriod() time.Duration { return time.Hour }

// env is one test's view of the API server: a client, the controller with a clock the test
// sets, and the events it published, each checked when published against what the API
// server holds.
type env struct {
	t      *testing.T
	kube   client.Client
	clock  *clocktesting.FakeClock
	events *afterWrite
	c      *Controller
}

// afterWrite records events, and fails the test when one about a hold is published before
// the Fulfillment's status in the API server says so.
type afterWrite struct {
	t    *testing.T
	kube client.Client
	mu   sync.Mutex
	got  []events.Event
}

func (r *afterWrite) Publish(evts ...events.Event) {
	for _, e := range evts {
		if f, ok := e.InvolvedObject.(*v1alpha1.Fulfillment); ok {
			current := &v1alpha1.Fulfillment{}
			if err := r.kube.Get(context.Background(), client.ObjectKeyFromObject(f), current); err != nil {
				r.t.Errorf("reading %s when its event %s was published: %v", f.Name, e.Reason, err)
			} else if c := held(current); c == nil && e.Reason != v1alpha1.ReasonScaleDownReleased || c != nil && c.Reason != e.Reason {
				r.t.Errorf("event %s published before the status write: ScaleDownHeld is %+v", e.Reason, c)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, evts...)
}

// take returns the events published since the last call, as "Kind Reason: message".
func (r *afterWrite) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.got {
		out = append(out, fmt.Sprintf("%T %s: %s", e.InvolvedObject, e.Reason, e.Message))
	}
	r.got = nil
	return out
}

func newEnv(t *testing.T) *env {
	t.Helper()
	kube, err := client.New(controlPlane.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	families, err := family.NewRegistry(hourly{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(applied)
	rec := &afterWrite{t: t, kube: kube}
	return &env{t: t, kube: kube, clock: clk, events: rec,
		c: NewController(Options{Kube: kube, Clock: clk, Recorder: rec, Families: families})}
}

// class makes a Hetzner Cloud class, with the billing-aware scale-down (5 minutes' margin)
// when on.
func (e *env) class(name string, on bool) *v1alpha1.TofuNodeClass {
	e.t.Helper()
	nc := test.NodeClass(name, func(nc *v1alpha1.TofuNodeClass) {
		nc.UID = ""
		nc.Spec.Family = v1alpha1.FamilyHcloud
		if on {
			nc.Spec.ScaleDown = &v1alpha1.ScaleDown{Policy: v1alpha1.ScaleDownAtPaidPeriodEnd, Margin: &metav1.Duration{Duration: 5 * time.Minute}}
		}
	})
	test.ExpectApplied(e.t, e.kube, nc)
	return nc
}

// claim makes an initialized, Consolidatable claim of class, its Fulfillment (applied at
// applied) and its Ready Node with a daemon's pod on it, kept alive by a node lease, and
// changes the NodeClaim and Node with the options.
func (e *env) claim(name, class string, claimOpt func(*karpv1.NodeClaim), nodeOpt func(*corev1.Node)) (*v1alpha1.Fulfillment, *karpv1.NodeClaim, *corev1.Node) {
	e.t.Helper()
	nodeClaim := test.NodeClaim(name, class, applied.Add(-time.Minute), func(c *karpv1.NodeClaim) {
		c.UID = ""
		conds := c.StatusConditions()
		conds.SetTrue(karpv1.ConditionTypeLaunched)
		conds.SetTrue(karpv1.ConditionTypeRegistered)
		conds.SetTrue(karpv1.ConditionTypeInitialized)
		conds.SetTrue(karpv1.ConditionTypeConsolidatable)
		c.Status.ProviderID, c.Status.NodeName = "hcloud://"+name, name
		if claimOpt != nil {
			claimOpt(c)
		}
	})
	test.ExpectApplied(e.t, e.kube, nodeClaim)
	stamp := metav1.NewTime(applied)
	f := test.Fulfillment(nodeClaim, applied.Add(-time.Minute), func(f *v1alpha1.Fulfillment) {
		f.Finalizers = nil
		f.Spec.ProviderID = ""
		f.Status.ProviderID, f.Status.NodeName, f.Status.Stages.Applied = "hcloud://"+name, name, &stamp
		f.Status.Phase = v1alpha1.PhaseReady
	})
	test.ExpectApplied(e.t, e.kube, f)
	node := test.Node(name, "hcloud://"+name, applied, func(n *corev1.Node) {
		n.Labels = map[string]string{karpv1.NodePoolLabelKey: "default"}
		n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
		if nodeOpt != nil {
			nodeOpt(n)
		}
	})
	e.createNode(node)
	e.heartbeat(node)
	// A daemon runs on every node; Karpenter does not count it.
	e.pod(name+"-daemon", name, []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "cni", UID: "uid-cni"}})
	return test.ExpectExists(e.t, e.kube, f), test.ExpectExists(e.t, e.kube, nodeClaim), test.ExpectExists(e.t, e.kube, node)
}

// createNode creates the node with its status; the TTL controller annotates a new Node at
// once, so the status write reads it again on a conflict.
func (e *env) createNode(node *corev1.Node) {
	e.t.Helper()
	ctx := context.Background()
	status := node.Status
	if err := e.kube.Create(ctx, node); err != nil {
		e.t.Fatalf("creating node %s: %v", node.Name, err)
	}
	for attempt := 0; ; attempt++ {
		node.Status = status
		err := e.kube.Status().Update(ctx, node)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || attempt == 20 {
			e.t.Fatalf("setting the status of node %s: %v", node.Name, err)
		}
		if err := e.kube.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			e.t.Fatal(err)
		}
	}
}

// heartbeat renews the node's lease until the test ends, as its kubelet would: the node
// lifecycle controller keeps it Ready.
func (e *env) heartbeat(node *corev1.Node) {
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	renew := func() {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Namespace: corev1.NamespaceNodeLease}}
		err := e.kube.Get(ctx, client.ObjectKeyFromObject(lease), lease)
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &node.Name, ptr(int32(40)), &now
		if apierrors.IsNotFound(err) {
			err = e.kube.Create(ctx, lease)
		} else if err == nil {
			err = e.kube.Update(ctx, lease)
		}
		if err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
			e.t.Errorf("renewing the lease of node %s: %v", node.Name, err)
		}
	}
	renew()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
				renew()
			}
		}
	}()
}

func ptr[T any](v T) *T { return &v }

// pod binds a pod to node (no scheduler, no kubelet: it stays Pending, which Karpenter counts
// as running there).
func (e *env) pod(name, node string, owners []metav1.OwnerReference) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", OwnerReferences: owners},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	if err := e.kube.Create(context.Background(), p); err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
	return p
}

// reconcile runs the controller on the claim at applied + after, as the manager would on a
// change, and returns when it asks to be called again.
func (e *env) reconcile(f *v1alpha1.Fulfillment, after time.Duration) time.Duration {
	e.t.Helper()
	e.clock.SetTime(applied.Add(after))
	var r reconcile.Result
	// As the manager does: again at once when a Node another controller changed meanwhile
	// (the TTL and node lifecycle controllers write new Nodes) refused the write.
	for attempt := 0; attempt == 0 || r.RequeueAfter == nodeChangedRequeue; attempt++ {
		if attempt == 20 {
			e.t.Fatalf("reconcile at +%s: the node kept changing", after)
		}
		var err error
		if r, err = e.c.Reconcile(context.Background(), test.ExpectExists(e.t, e.kube, f.DeepCopy())); err != nil {
			e.t.Fatalf("reconcile at +%s: %v", after, err)
		}
	}
	if r != (reconcile.Result{RequeueAfter: r.RequeueAfter}) {
		e.t.Errorf("result %+v", r)
	}
	return r.RequeueAfter
}

// expect checks the claim's ScaleDownHeld condition (nil want: none) and the node's
// annotations.
func (e *env) expect(f *v1alpha1.Fulfillment, node *corev1.Node, want *status.Condition, annotations map[string]string) {
	e.t.Helper()
	got := held(test.ExpectExists(e.t, e.kube, f.DeepCopy()))
	switch {
	case want == nil && got != nil:
		e.t.Errorf("ScaleDownHeld = %+v, want none", got)
	case want != nil && (got == nil || got.Status != want.Status || got.Reason != want.Reason || !strings.Contains(got.Message, want.Message)):
		e.t.Errorf("ScaleDownHeld = %+v, want %s %s with %q", got, want.Status, want.Reason, want.Message)
	}
	n := test.ExpectExists(e.t, e.kube, node.DeepCopy())
	for _, k := range []string{karpv1.DoNotDisruptAnnotationKey, keys.AnnotationScaleDownHeld} {
		if g, w := n.Annotations[k], annotations[k]; g != w {
			e.t.Errorf("node %s annotation %s = %q, want %q", n.Name, k, g, w)
		}
	}
}

func cond(s metav1.ConditionStatus, reason, message string) *status.Condition {
	return &status.Condition{Status: s, Reason: reason, Message: message}
}

func expectEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("events %q, want %d like %q", got, len(want), want)
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("event %d = %q, want it to contain %q", i, got[i], want[i])
		}
	}
}

// An empty node within its paid hour is held, with the reason on its Fulfillment and an
// event, until the margin before the hour ends; then it is let go. In the next hour, should
// Karpenter not have taken it, it is held again (that hour is paid too); a pod landing on it
// ends the hold at once.
func TestHeldUntilTheMargin(t *testing.T) {
	e := newEnv(t)
	e.class("hourly", true)
	f, _, node := e.claim("held", "hourly", nil, nil)

	requeue := e.reconcile(f, 10*time.Minute)
	heldUntil := map[string]string{karpv1.DoNotDisruptAnnotationKey: "true", keys.AnnotationScaleDownHeld: at(55 * time.Minute)}
	e.expect(f, node, cond(metav1.ConditionTrue, v1alpha1.ReasonHeldForPaidPeriod, "empty, but paid until "+at(time.Hour)+": kept until "+at(55*time.Minute)), heldUntil)
	if want := 45*time.Minute + time.Second; requeue != want {
		t.Errorf("held: requeued after %s, want %s (the margin)", requeue, want)
	}
	expectEvents(t, e.events.take(),
		"Fulfillment HeldForPaidPeriod: node kept from consolidation: empty, but paid until "+at(time.Hour),
		"NodeClaim HeldForPaidPeriod: node kept from consolidation")

	// Nothing changes on the way: no write, no event.
	e.reconcile(f, 30*time.Minute)
	e.expect(f, node, cond(metav1.ConditionTrue, v1alpha1.ReasonHeldForPaidPeriod, ""), heldUntil)
	expectEvents(t, e.events.take())

	requeue = e.reconcile(f, 55*time.Minute)
	e.expect(f, node, cond(metav1.ConditionFalse, v1alpha1.ReasonPaidPeriodEnding, "its paid period ends at "+at(time.Hour)+": let go"), nil)
	if want := 5*time.Minute + time.Second; requeue != want {
		t.Errorf("let go: requeued after %s, want %s (the next period)", requeue, want)
	}
	expectEvents(t, e.events.take(), "Fulfillment PaidPeriodEnding: node let go for consolidation", "NodeClaim PaidPeriodEnding")

	e.reconcile(f, 61*time.Minute)
	e.expect(f, node, cond(metav1.ConditionTrue, v1alpha1.ReasonHeldForPaidPeriod, "kept until "+at(115*time.Minute)),
		map[string]string{karpv1.DoNotDisruptAnnotationKey: "true", keys.AnnotationScaleDownHeld: at(115 * time.Minute)})
	e.events.take()

	// A pod lands on the held node.
	e.pod("held-app", node.Name, nil)
	if requeue := e.reconcile(f, 62*time.Minute); requeue != 0 {
		t.Errorf("not empty: requeued after %s, want only on a change", requeue)
	}
	e.expect(f, node, cond(metav1.ConditionFalse, v1alpha1.ReasonNotEmpty, "pods run on the node"), nil)
	expectEvents(t, e.events.take(), "Fulfillment NotEmpty: node let go for consolidation", "NodeClaim NotEmpty")
}

// A node Karpenter would not consolidate (not Consolidatable: consolidateAfter has not
// passed, or its NodePool does not consolidate) is not held however empty, nor a drifted,
// expired or unhealthy one; each says why, and none has an event.
func TestNeverHeld(t *testing.T) {
	e := newEnv(t)
	e.class("never", true)
	for _, tc := range []struct {
		name     string
		claimOpt func(*karpv1.NodeClaim)
		nodeOpt  func(*corev1.Node)
		reason   string
		message  string
	}{
		{name: "not-consolidatable", claimOpt: func(c *karpv1.NodeClaim) { _ = c.StatusConditions().Clear(karpv1.ConditionTypeConsolidatable) },
			reason: v1alpha1.ReasonNotConsolidatable, message: "not Consolidatable"},
		{name: "drifted", claimOpt: func(c *karpv1.NodeClaim) { c.StatusConditions().SetTrue(karpv1.ConditionTypeDrifted) },
			reason: v1alpha1.ReasonNodeDrifted, message: "drifted"},
		{name: "expired", claimOpt: func(c *karpv1.NodeClaim) { c.Spec.ExpireAfter = karpv1.MustParseNillableDuration("10m") },
			reason: v1alpha1.ReasonNodeExpired, message: "expired"},
		{name: "unhealthy", nodeOpt: func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse },
			reason: v1alpha1.ReasonNodeUnhealthy, message: "not Ready"},
	} {
		// (The helpers fail this test, so no subtests.)
		f, _, node := e.claim("never-"+tc.name, "never", tc.claimOpt, tc.nodeOpt)
		e.reconcile(f, 20*time.Minute)
		e.expect(f, node, cond(metav1.ConditionFalse, tc.reason, tc.message), nil)
		expectEvents(t, e.events.take())
	}

	// A held node that drifts is let go at once.
	f, nodeClaim, node := e.claim("never-drifts-later", "never", nil, nil)
	e.reconcile(f, 20*time.Minute)
	e.expect(f, node, cond(metav1.ConditionTrue, v1alpha1.ReasonHeldForPaidPeriod, ""),
		map[string]string{karpv1.DoNotDisruptAnnotationKey: "true", keys.AnnotationScaleDownHeld: at(55 * time.Minute)})
	e.events.take()
	nodeClaim.StatusConditions().SetTrue(karpv1.ConditionTypeDrifted)
	if err := e.kube.Status().Update(context.Background(), nodeClaim); err != nil {
		t.Fatal(err)
	}
	e.reconcile(f, 21*time.Minute)
	e.expect(f, node, cond(metav1.ConditionFalse, v1alpha1.ReasonNodeDrifted, ""), nil)
	expectEvents(t, e.events.take(), "Fulfillment Drifted: node let go for consolidation: drifted", "NodeClaim Drifted")
}

// A karpenter.sh/do-not-disrupt annotation someone else set is never changed: not when the
// policy would hold the node, not when it would let it go, not when the policy is turned off.
// One someone changes from the fulfiller's "true" is theirs from then on.
func TestOthersAnnotation(t *testing.T) {
	e := newEnv(t)
	nc := e.class("others", true)
	for _, value := range []string{"true", "false"} {
		f, _, node := e.claim("others-"+value, "others", nil, func(n *corev1.Node) {
			n.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: value}
		})
		theirs := map[string]string{karpv1.DoNotDisruptAnnotationKey: value}
		for _, after := range []time.Duration{10 * time.Minute, 56 * time.Minute} {
			e.reconcile(f, after)
			e.expect(f, node, cond(metav1.ConditionFalse, v1alpha1.ReasonDoNotDisruptSet, "did not set"), theirs)
		}
		expectEvents(t, e.events.take())
	}

	// Held by the fulfiller, then someone sets the annotation to "false": theirs.
	f, _, node := e.claim("others-changed", "others", nil, nil)
	e.reconcile(f, 10*time.Minute)
	e.events.take()
	node = test.ExpectExists(t, e.kube, node)
	node.Annotations[karpv1.DoNotDisruptAnnotationKey] = "false"
	if err := e.kube.Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	e.reconcile(f, 11*time.Minute)
	e.expect(f, node, cond(metav1.ConditionFalse, v1alpha1.ReasonDoNotDisruptSet, ""), map[string]string{karpv1.DoNotDisruptAnnotationKey: "false"})
	expectEvents(t, e.events.take(), "Fulfillment DoNotDisruptSet: node let go for consolidation", "NodeClaim DoNotDisruptSet")

	// The policy turned off: the users' annotations stay, the conditions go.
	nc = test.ExpectExists(t, e.kube, nc)
	nc.Spec.ScaleDown = nil
	if err := e.kube.Update(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	f = test.ExpectExists(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "others-true"}})
	e.reconcile(f, 12*time.Minute)
	e.expect(f, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "others-true"}}, nil, map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"})
	expectEvents(t, e.events.take())
}

// A class without the policy holds nothing and writes no condition; turning the policy off
// lets go of what it held, with an event.
func TestPolicyOff(t *testing.T) {
	e := newEnv(t)
	e.class("off", false)
	f, _, node := e.claim("off", "off", nil, nil)
	if requeue := e.reconcile(f, 10*time.Minute); requeue != 0 {
		t.Errorf("requeued after %s", requeue)
	}
	e.expect(f, node, nil, nil)

	nc := e.class("turned-off", true)
	f, _, node = e.claim("turned-off", "turned-off", nil, nil)
	e.reconcile(f, 10*time.Minute)
	e.expect(f, node, cond(metav1.ConditionTrue, v1alpha1.ReasonHeldForPaidPeriod, ""),
		map[string]string{karpv1.DoNotDisruptAnnotationKey: "true", keys.AnnotationScaleDownHeld: at(55 * time.Minute)})
	e.events.take()
	nc = test.ExpectExists(t, e.kube, nc)
	nc.Spec.ScaleDown.Policy = v1alpha1.ScaleDownImmediate
	if err := e.kube.Update(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	e.reconcile(f, 11*time.Minute)
	e.expect(f, node, nil, nil)
	expectEvents(t, e.events.take(), "Fulfillment ScaleDownReleased: node let go for consolidation", "NodeClaim ScaleDownReleased")
}

// The controller as the manager runs it, on its watches: a NodeClaim that becomes
// Consolidatable has its empty Node held without anything else calling it, and a pod that
// lands on the held node ends the hold; a class that turns the policy off has its claims'
// conditions removed. (The other tests call Reconcile at the times they
// set; here the clock stands at applied + 10 minutes.)
func TestWatches(t *testing.T) {
	e := newEnv(t)
	e.class("watched", true)
	f, nodeClaim, node := e.claim("watched", "watched", func(c *karpv1.NodeClaim) {
		_ = c.StatusConditions().Clear(karpv1.ConditionTypeConsolidatable)
	}, nil)
	e.clock.SetTime(applied.Add(10 * time.Minute))

	mgr, err := manager.New(controlPlane.Config, manager.Options{Scheme: scheme.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	// The index Karpenter's operator registers in the controller's cache.
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podNodeNameField, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		t.Fatal(err)
	}
	c := NewController(Options{Kube: mgr.GetClient(), Clock: e.clock, Recorder: e.events, Families: e.c.families})
	if err := c.Register(context.Background(), mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	annotations := func() map[string]string {
		return test.ExpectExists(t, e.kube, node.DeepCopy()).Annotations
	}
	testenv.Eventually(t, 30*time.Second, "the NotConsolidatable condition", func() bool {
		c := held(test.ExpectExists(t, e.kube, f.DeepCopy()))
		return c != nil && c.Reason == v1alpha1.ReasonNotConsolidatable
	})
	if a := annotations(); a[keys.AnnotationScaleDownHeld] != "" {
		t.Fatalf("held before Karpenter would consolidate it: %v", a)
	}

	nodeClaim = test.ExpectExists(t, e.kube, nodeClaim)
	nodeClaim.StatusConditions().SetTrue(karpv1.ConditionTypeConsolidatable)
	if err := e.kube.Status().Update(context.Background(), nodeClaim); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the node held", func() bool {
		a := annotations()
		return a[karpv1.DoNotDisruptAnnotationKey] == "true" && a[keys.AnnotationScaleDownHeld] == at(55*time.Minute)
	})

	e.pod("watched-app", node.Name, nil)
	testenv.Eventually(t, 30*time.Second, "the hold ended by a pod", func() bool {
		a := annotations()
		_, dnd := a[karpv1.DoNotDisruptAnnotationKey]
		_, mark := a[keys.AnnotationScaleDownHeld]
		return !dnd && !mark
	})
	testenv.Eventually(t, 30*time.Second, "the NotEmpty condition", func() bool {
		c := held(test.ExpectExists(t, e.kube, f.DeepCopy()))
		return c != nil && c.Reason == v1alpha1.ReasonNotEmpty
	})

	// The class turns the policy off: its claims are reconciled, and the condition goes.
	nc := test.ExpectExists(t, e.kube, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "watched"}})
	nc.Spec.ScaleDown = nil
	if err := e.kube.Update(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the condition gone with the policy", func() bool {
		return held(test.ExpectExists(t, e.kube, f.DeepCopy())) == nil
	})
}
