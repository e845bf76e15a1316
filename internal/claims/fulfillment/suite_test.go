// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// The controller-level tests drive the whole Fulfillment reconcile and the CloudProvider with
// a fake API client, a fake clock and the fake executor: no control plane, no tofu.
const testNamespace = "fulfiller"

// env is one test's world.
type env struct {
	t           *testing.T
	ctx         context.Context
	kube        client.WithWatch
	clock       *clocktesting.FakeClock
	events      *test.Recorder
	exec        *fake.Executor
	unavailable *cloudprovider.UnavailableOfferings
	controller  *Controller
	provider    *cloudprovider.CloudProvider
	// writes records, for each status write of a Fulfillment, how many events had been
	// published when it happened.
	writes []int
	// conflicts is how many status writes of a Fulfillment fail with a conflict next.
	conflicts int
	// secretReads are the Secrets read, as namespace/name.
	secretReads []string
}

// newEnv starts a world with the cluster CA, a Ready class "sim" (the test builders' defaults)
// and objs.
func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), events: &test.Recorder{}}
	ca, err := test.ClusterCA(testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	nc := test.NodeClass("sim")
	test.Ready(nc)
	e.kube = test.NewClient(&interceptor.Funcs{SubResourcePatch: e.statusPatch, Get: e.get}, ca)
	test.ExpectApplied(t, e.kube, nc)
	test.ExpectApplied(t, e.kube, objs...)
	e.exec = fake.New(e.clock)
	e.unavailable = cloudprovider.NewUnavailableOfferings(e.clock, cloudprovider.UnavailableOfferingsTTL)
	e.rebuild(nil)
	return e
}

// testServerVersion is the API server's version the tests' classes install when they name
// none.
func testServerVersion(context.Context) (string, error) { return "v1.36.3", nil }

// rebuild builds the world's controller and CloudProvider again, with the options change
// makes (nil: the defaults).
func (e *env) rebuild(change func(*Options)) {
	o := Options{Kube: e.kube, APIReader: e.kube, Clock: e.clock, Recorder: e.events, Executor: e.exec, Unavailable: e.unavailable,
		Namespace: testNamespace, StateNamespace: testNamespace, TofuPath: "/bin/tofu", ServerVersion: testServerVersion}
	if change != nil {
		change(&o)
	}
	e.controller = NewController(o)
	e.provider = cloudprovider.New(cloudprovider.Options{Kube: e.kube, Clock: e.clock, Unavailable: e.unavailable, StateNamespace: testNamespace,
		Families: o.Families})
}

// get records the Secrets read.
func (e *env) get(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		e.secretReads = append(e.secretReads, key.String())
	}
	return c.Get(ctx, key, obj, opts...)
}

// statusPatch counts the Fulfillment's status writes and fails as many as conflicts says.
func (e *env) statusPatch(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if _, ok := obj.(*v1alpha1.Fulfillment); ok && sub == "status" {
		if e.conflicts > 0 {
			e.conflicts--
			return apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.Group, Resource: "fulfillments"}, obj.GetName(),
				errors.New("the object has been modified"))
		}
		e.writes = append(e.writes, e.events.Len())
	}
	return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
}

// fulfillment reads a Fulfillment.
func (e *env) fulfillment(name string) *v1alpha1.Fulfillment {
	e.t.Helper()
	return test.ExpectExists(e.t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// doneReasons are the events of what a reconcile did outside the status (run.Claim.Done),
// published whatever becomes of its status write, and last.
var doneReasons = []string{v1alpha1.ReasonStaleLockRecovered}

// reconcile runs one reconcile of the Fulfillment as controller-runtime would (read, then
// Reconcile) and checks that the events it published came after its status write, except
// the doneReasons ones.
func (e *env) reconcile(name string) reconcile.Result {
	e.t.Helper()
	f := e.fulfillment(name)
	before, writes := e.events.Len(), len(e.writes)
	res, err := e.controller.Reconcile(e.ctx, f)
	if err != nil {
		e.t.Fatalf("reconcile of %s: %v", name, err)
	}
	published := e.events.Reasons()[before:]
	for len(published) > 0 && slices.Contains(doneReasons, published[len(published)-1]) {
		published = published[:len(published)-1]
	}
	if len(published) > 0 && (len(e.writes) == writes || slices.ContainsFunc(e.writes[writes:], func(n int) bool { return n != before })) {
		e.t.Errorf("reconcile of %s published events %v without, or before, its status write", name, published)
	}
	return res
}

// create is CloudProvider.Create of the claim, which must succeed.
func (e *env) create(claim *karpv1.NodeClaim) *karpv1.NodeClaim {
	e.t.Helper()
	test.ExpectApplied(e.t, e.kube, claim)
	got, err := e.provider.Create(e.ctx, claim)
	if err != nil {
		e.t.Fatalf("create %s: %v", claim.Name, err)
	}
	return got
}

// expectCondition checks a condition of the Fulfillment.
func (e *env) expectCondition(name, conditionType string, want metav1.ConditionStatus, reason string) *status.Condition {
	e.t.Helper()
	return test.ExpectCondition(e.t, e.fulfillment(name), conditionType, want, reason)
}

// expectRuns checks the Fulfillment's runs: name and phase of each, oldest first.
func (e *env) expectRuns(name string, want ...string) {
	e.t.Helper()
	var got []string
	for _, r := range e.fulfillment(name).Status.Runs {
		got = append(got, r.Name+"="+string(r.Phase))
	}
	if !slices.Equal(got, want) {
		e.t.Errorf("runs of %s: %v, want %v", name, got, want)
	}
}

// expectCreated checks which runs the executor created, in order (a run started again
// after the executor lost it shows twice).
func (e *env) expectCreated(want ...string) {
	e.t.Helper()
	if got := e.exec.Created(); !slices.Equal(got, want) {
		e.t.Errorf("runs created: %v, want %v", got, want)
	}
}

// expectEvents checks the reasons of the events published since the last call.
func (e *env) expectEvents(want ...string) {
	e.t.Helper()
	if got := e.events.Reasons(); !slices.Equal(got, want) {
		e.t.Errorf("events %v, want %v", got, want)
	}
	e.events.Reset()
	e.writes = nil
}

// writeState stands for what a claim's apply leaves: its state Secret in the state namespace.
func (e *env) writeState(name string) {
	e.t.Helper()
	f := e.fulfillment(name)
	test.ExpectApplied(e.t, e.kube, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: statelock.Key(f.Spec.StateKey).SecretName()}})
}
