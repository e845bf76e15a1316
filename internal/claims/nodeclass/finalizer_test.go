// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/events"

	fulfillercloud "github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/preflight"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestClassKeptWhileItsClaimsExist: `kubectl delete` of a class with live claims leaves it,
// terminating, until the last Fulfillment that references it is gone, saying how many
// remain; a class without claims goes at once. Meanwhile it takes no new claim.
func TestClassKeptWhileItsClaimsExist(t *testing.T) {
	ctx := context.Background()
	module := writeModule(t, map[string]string{"main.tf": `
variable "node_name" { type = string }
output "provider_id" { value = "sim://${var.node_name}" }
`})
	nc := test.TwoTypeClass()
	nc.Spec.Module.Source = module
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var fulfillments []client.Object
	for _, name := range []string{"c-1", "c-2"} {
		f := test.Fulfillment(test.NodeClaim(name, nc.Name, now), now)
		fulfillments = append(fulfillments, f)
	}
	other := test.Fulfillment(test.NodeClaim("d-1", "d", now), now)
	kube := test.NewClient(nil, append(fulfillments, nc, other)...)
	rec := &recordedEvents{}
	c := NewController(Options{Kube: kube, APIReader: kube, Clock: clocktesting.NewFakeClock(now), Recorder: rec, SecretNamespace: testNamespace})
	c.preflight = func(context.Context) (*preflight.Failure, error) { return nil, nil }
	reconcileClass := func() {
		t.Helper()
		got := &v1alpha1.TofuNodeClass{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), got); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reconcile(ctx, got); err != nil {
			t.Fatal(err)
		}
	}

	reconcileClass()
	got := test.ExpectExists(t, kube, nc.DeepCopy())
	if !controllerutil.ContainsFinalizer(got, FinalizerClaims) {
		t.Fatalf("finalizers %v, want %s", got.Finalizers, FinalizerClaims)
	}
	if err := kube.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	reconcileClass()
	got = test.ExpectExists(t, kube, nc.DeepCopy())
	cond := test.ExpectCondition(t, got, v1alpha1.ConditionTerminating, metav1.ConditionTrue, v1alpha1.ReasonClaimsRemaining)
	if !strings.Contains(cond.Message, "waiting for 2 claims to be destroyed") {
		t.Errorf("Terminating's message %q", cond.Message)
	}

	// A terminating class launches nothing new.
	clk := clocktesting.NewFakeClock(now)
	p := fulfillercloud.New(fulfillercloud.Options{Kube: kube, Clock: clk, Unavailable: fulfillercloud.NewUnavailableOfferings(clk, time.Minute)})
	test.Ready(got)
	test.ExpectApplied(t, kube, got)
	claim := test.NodeClaim("c-3", nc.Name, now, func(c *karpv1.NodeClaim) {
		c.Spec.Requirements[0].Values = []string{"small", "large"}
	})
	if _, err := p.Create(ctx, claim); !cloudprovider.IsNodeClassNotReadyError(err) {
		t.Errorf("create with a terminating class: %v, want NodeClassNotReady", err)
	}

	first := test.ExpectExists(t, kube, fulfillments[0].DeepCopyObject().(client.Object))
	first.SetFinalizers(nil)
	if err := kube.Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := kube.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	reconcileClass()
	got = test.ExpectExists(t, kube, nc.DeepCopy())
	if cond := got.StatusConditions().Get(v1alpha1.ConditionTerminating); cond == nil || !strings.Contains(cond.Message, "waiting for 1 claim to be destroyed") {
		t.Errorf("Terminating %+v", cond)
	}
	// Still there while its Fulfillment finishes the destroy (finalizer held).
	f := test.ExpectExists(t, kube, fulfillments[1].DeepCopyObject().(client.Object))
	if err := kube.Delete(ctx, f); err != nil {
		t.Fatal(err)
	}
	reconcileClass()
	test.ExpectExists(t, kube, nc.DeepCopy())
	f = test.ExpectExists(t, kube, f)
	f.SetFinalizers(nil)
	if err := kube.Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	reconcileClass()
	test.ExpectNotFound(t, kube, nc)
	test.ExpectExists(t, kube, other)
}

// TestClassEventsPerClass: Karpenter's recorder dedupes events by reason and dedupe values
// alone, so a class's events must carry the class: two classes deleted, or becoming Ready,
// within the dedupe window each say so.
func TestClassEventsPerClass(t *testing.T) {
	for name, event := range map[string]func(*v1alpha1.TofuNodeClass) events.Event{
		"terminating": func(nc *v1alpha1.TofuNodeClass) events.Event {
			return nodeClassTerminatingEvent(nc, "waiting for 1 claim to be destroyed")
		},
		"ready": func(nc *v1alpha1.TofuNodeClass) events.Event {
			return nodeClassEvent(nc, true, v1alpha1.ReasonReady, "every check passed")
		},
	} {
		fake := record.NewFakeRecorder(10)
		rec := events.NewRecorder(fake)
		for _, class := range []string{"a", "b", "a"} {
			rec.Publish(event(test.NodeClass(class)))
		}
		if got := len(fake.Events); got != 2 {
			t.Errorf("%d %s events published for classes a, b and a again, want 2", got, name)
		}
	}
}
