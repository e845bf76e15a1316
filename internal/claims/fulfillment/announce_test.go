// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpcloudprovider "sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// TestAnnounceProviderID: without a template, Create does not wait for the apply; the claim
// is told its provider ID once the apply reported it, and Create returns it.
func TestAnnounceProviderID(t *testing.T) {
	e := newEnv(t)
	claim := test.NodeClaim("sim-x7k2q", "sim", e.clock.Now())

	nc := test.NodeClass("sim", func(nc *v1alpha1.TofuNodeClass) { nc.Spec.NodeTypes[0].ProviderIDTemplate = "" })
	test.Ready(nc)
	test.ExpectApplied(t, e.kube, nc, claim)
	e.exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Polls: 1, ProviderID: "hcloud://4711"})
	awaiting, reported := createCount(t, "awaiting"), createCount(t, "reported")
	defer func() {
		// Each Create is measured by how it answered.
		if a, r := createCount(t, "awaiting")-awaiting, createCount(t, "reported")-reported; a != 2 || r != 1 {
			t.Errorf("create_duration_seconds counted %d awaiting and %d reported creates, want 2 and 1", a, r)
		}
	}()
	before := e.clock.Now()
	_, err := e.provider.Create(e.ctx, claim)
	expectCreateError(t, err, v1alpha1.ReasonAwaitingProviderID)
	if e.clock.Since(before) != 0 {
		t.Errorf("create waited %s by the clock", e.clock.Since(before))
	}
	e.reconcile(claim.Name) // starts the apply
	if got := e.claim(claim.Name); got.Annotations[classconfig.AnnotationProviderID] != "" {
		t.Errorf("announced before the apply reported: %v", got.Annotations)
	}
	_, err = e.provider.Create(e.ctx, e.claim(claim.Name))
	expectCreateError(t, err, v1alpha1.ReasonAwaitingProviderID)
	e.reconcile(claim.Name)
	e.reconcile(claim.Name) // the apply has ended
	announced := e.claim(claim.Name)
	if announced.Annotations[classconfig.AnnotationProviderID] != "hcloud://4711" {
		t.Fatalf("claim annotations %v, want the provider ID announced", announced.Annotations)
	}
	got, err := e.provider.Create(e.ctx, announced)
	if err != nil || got.Status.ProviderID != "hcloud://4711" {
		t.Fatalf("create after the apply: %+v, %v", got, err)
	}
	// Once Karpenter has the provider ID, the claim is not touched again.
	launched := announced.DeepCopy()
	launched.Status.ProviderID = "hcloud://4711"
	delete(launched.Annotations, classconfig.AnnotationProviderID)
	test.ExpectApplied(t, e.kube, launched)
	e.reconcile(claim.Name)
	if a := e.claim(claim.Name).Annotations[classconfig.AnnotationProviderID]; a != "" {
		t.Errorf("announced again to a launched claim: %q", a)
	}
}

// claim reads the NodeClaim name.
func (e *env) claim(name string) *karpv1.NodeClaim {
	e.t.Helper()
	return test.ExpectExists(e.t, e.kube, &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// expectCreateError checks that err is a CreateError with the condition reason.
func expectCreateError(t *testing.T, err error, reason string) {
	t.Helper()
	var ce *karpcloudprovider.CreateError
	if !errors.As(err, &ce) || ce.ConditionReason != reason {
		t.Errorf("error %v, want a CreateError %s", err, reason)
	}
}

// createCount is how many Creates the CloudProvider's create_duration_seconds measured with
// the provider_id label.
func createCount(t *testing.T, label string) uint64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "fulfiller_cloudprovider_create_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "provider_id" && l.GetValue() == label {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}
