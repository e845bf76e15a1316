// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/claims/garbagecollection"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestCollectorDeletesOnlyItsOwnSecrets: the orphan collector and token revocation delete the
// bootstrap token and user data the fulfiller made for a claim, never a Secret someone else
// labelled with the claim's name, whatever its type.
func TestCollectorDeletesOnlyItsOwnSecrets(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	foreign := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "someones-config", Labels: map[string]string{keys.LabelNodeClaim: "gone"}},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("v")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-zzzzzz", Labels: map[string]string{keys.LabelNodeClaim: "gone"}},
			Type: "bootstrap.kubernetes.io/token", Data: map[string][]byte{"token-id": []byte("zzzzzz")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "gone-notes", Labels: map[string]string{keys.LabelNodeClaim: "gone"}},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("v")}},
	}
	ca, err := test.ClusterCA("fulfiller")
	if err != nil {
		t.Fatal(err)
	}
	builder := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(ca).
		WithIndex(&corev1.Secret{}, "type", func(o client.Object) []string { return []string{string(o.(*corev1.Secret).Type)} })
	for _, s := range foreign {
		builder = builder.WithObjects(s)
	}
	kube := builder.Build()
	// The fulfiller's own token and user data for claim "gone", as the bootstrap stage makes them.
	stage := &bootstrapStage{kube: kube, apiReader: kube, clock: clk, namespace: "fulfiller", serverVersion: testServerVersion,
		unavailable: cloudprovider.NewUnavailableOfferings(clk, time.Minute)}
	for _, claim := range []string{"gone"} {
		nc := test.TwoTypeClass()
		f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: v1alpha1.FulfillmentSpec{NodeType: nc.Spec.NodeTypes[0].Name, NodeName: claim, Zone: "a", CapacityType: "on-demand", ProviderID: "sim://" + claim}}
		s := &claimState{Claim: run.Claim{F: f, Class: nc, NodeType: &nc.Spec.NodeTypes[0]}, claim: &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim}}}
		s.Conds = f.StatusConditions(status.WithClock(clk))
		if _, err := stage.reconcile(ctx, s); err != nil {
			t.Fatal(err)
		}
		if s.F.Status.UserDataSecret == "" {
			t.Fatalf("no user data for %s: %+v", claim, s.Conds.Get(v1alpha1.ConditionApplied))
		}
	}
	countOwn := func(claim string) int {
		t.Helper()
		list := &corev1.SecretList{}
		if err := kube.List(ctx, list, client.MatchingLabels{keys.LabelNodeClaim: claim}); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range list.Items {
			if !isForeign(s.Name, foreign) {
				n++
			}
		}
		return n
	}
	if n := countOwn("gone"); n != 2 {
		t.Fatalf("%d secrets of claim gone, want its token and user data", n)
	}

	clk.Step(2 * garbagecollection.SecretGracePeriod)
	if err := garbagecollection.NewSecretCollector(garbagecollection.SecretOptions{Kube: kube, APIReader: kube, Clock: clk, Namespace: "fulfiller", Interval: time.Minute}).Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := revokeTokens(ctx, kube, "gone"); err != nil {
		t.Fatal(err)
	}
	if n := countOwn("gone"); n != 0 {
		t.Errorf("%d of the claim's own secrets left after collection", n)
	}
	for _, s := range foreign {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{}); err != nil {
			t.Errorf("foreign secret %s/%s labelled with the claim: %v", s.Namespace, s.Name, err)
		}
	}
}

func isForeign(name string, foreign []*corev1.Secret) bool {
	for _, s := range foreign {
		if s.Name == name {
			return true
		}
	}
	return false
}
