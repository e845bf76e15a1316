// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// TestDestroyKeepsFailingPastTheRunHistory (issue 25, defect 1): a destroy that fails more
// often than the status keeps runs (its apply falls out of the history) is retried as long as
// it fails: the state, the machine's record, stays, the Fulfillment keeps its finalizer, and
// nothing concludes that nothing was ever applied. Once a destroy succeeds, the state goes
// and the claim with it.
func TestDestroyKeepsFailingPastTheRunHistory(t *testing.T) {
	e := newEnv(t)
	claim := test.NodeClaim("sim-d3str", "sim", e.clock.Now())
	e.create(claim)
	e.reconcile(claim.Name) // the apply starts
	e.reconcile(claim.Name) // and succeeds
	e.expectCondition(claim.Name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
	e.writeState(claim.Name)
	live := test.ExpectExists(t, e.kube, claim.DeepCopy())
	e.exec.ScriptOperation(tfrunner.Destroy, fake.Fails(tfrunner.Transient, "server 42: delete refused (service_error)"))
	if err := e.provider.Delete(e.ctx, live); err != nil {
		t.Fatal(err)
	}
	state := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: statelock.Key(e.fulfillment(claim.Name).Spec.StateKey).SecretName()}}
	const failures = 25 // more than twice the history the status keeps
	for i := 1; i <= failures; i++ {
		e.reconcile(claim.Name) // destroy i starts
		e.reconcile(claim.Name) // and fails: retried after a backoff
		f := &v1alpha1.Fulfillment{}
		if err := e.kube.Get(e.ctx, client.ObjectKey{Name: claim.Name}, f); err != nil {
			t.Fatalf("after %d failed destroys: %v: the claim was given up, its machine left running", i, err)
		}
		if c := f.StatusConditions().Get(v1alpha1.ConditionDestroyed); c == nil || c.IsTrue() || f.Status.Stages.Destroyed != nil {
			t.Fatalf("after %d failed destroys: Destroyed %+v: the claim was given up", i, c)
		}
		test.ExpectExists(t, e.kube, state.DeepCopy())
		e.clock.Step(10 * time.Minute)
	}
	if got := len(e.exec.Created()); got != 1+failures {
		t.Errorf("%d runs created, want the apply and %d destroys", got, failures)
	}
	// The cloud recovers.
	e.exec.ScriptOperation(tfrunner.Destroy, fake.Outcome{})
	e.reconcile(claim.Name)
	e.reconcile(claim.Name)
	test.ExpectNotFound(t, e.kube, state, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim.Name}})
	if last := e.exec.Created()[len(e.exec.Created())-1]; last != fmt.Sprintf("%s-destroy-%d", claim.Name, failures+1) {
		t.Errorf("last run %s, want destroy %d", last, failures+1)
	}
}
