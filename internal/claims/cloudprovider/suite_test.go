// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// The CloudProvider's tests call it with a fake API client and a fake clock; what the
// Fulfillment controller does with the records is the fulfillment package's tests'.

const testNamespace = "fulfiller"

// env is one test's world.
type env struct {
	t           *testing.T
	ctx         context.Context
	kube        client.WithWatch
	clock       *clocktesting.FakeClock
	unavailable *UnavailableOfferings
	provider    *CloudProvider
}

// newEnv starts a world with a Ready class "sim" (the test builders' defaults) and objs.
func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))}
	nc := test.NodeClass("sim")
	test.Ready(nc)
	e.kube = test.NewClient(nil)
	test.ExpectApplied(t, e.kube, nc)
	test.ExpectApplied(t, e.kube, objs...)
	e.unavailable = NewUnavailableOfferings(e.clock, UnavailableOfferingsTTL)
	e.provider = New(Options{Kube: e.kube, Clock: e.clock, Unavailable: e.unavailable, StateNamespace: testNamespace})
	return e
}

// create is Create of the claim, which must succeed.
func (e *env) create(claim *karpv1.NodeClaim) *karpv1.NodeClaim {
	e.t.Helper()
	test.ExpectApplied(e.t, e.kube, claim)
	got, err := e.provider.Create(e.ctx, claim)
	if err != nil {
		e.t.Fatalf("create %s: %v", claim.Name, err)
	}
	return got
}

// fulfillment reads a Fulfillment.
func (e *env) fulfillment(name string) *v1alpha1.Fulfillment {
	e.t.Helper()
	return test.ExpectExists(e.t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}})
}
