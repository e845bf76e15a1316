// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// TestDeletedWhileFirstApplyStarts: the first apply's runner is started, then the status
// write that records it conflicts, and the claim is deleted before another reconcile. The
// run is not in the status, but it goes on and makes a machine and a state: the finalizer
// must find it by its name and the claim's UID, stop it, and destroy what it made, not let
// the Fulfillment go as if nothing had been applied.
func TestDeletedWhileFirstApplyStarts(t *testing.T) {
	e := newEnv(t)
	e.exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Hold: true, StopDelay: 5 * time.Second})
	claim := test.NodeClaim("sim-race1", "sim", e.clock.Now())
	e.create(claim)
	e.conflicts = 1 // exactly the write that records the started run
	e.reconcile(claim.Name)
	e.expectCreated("sim-race1-apply-1")
	if f := e.fulfillment(claim.Name); len(f.Status.Runs) != 0 {
		t.Fatalf("the conflicting write recorded runs %v", f.Status.Runs)
	}
	// The runner writes the machine's state meanwhile.
	e.writeState(claim.Name)

	if err := e.provider.Delete(e.ctx, claim); err != nil {
		t.Fatal(err)
	}
	e.reconcile(claim.Name)
	f := e.fulfillment(claim.Name)
	if !f.DeletionTimestamp.IsZero() && len(f.Finalizers) == 0 {
		t.Fatal("the Fulfillment was let go while its first apply runs")
	}
	e.expectRuns(claim.Name, "sim-race1-apply-1=Running")
	e.expectCondition(claim.Name, v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonStoppingApply)
	// The apply found is recorded as the lost write would have: its start too, which the run
	// history may lose later (issue 25, defect 1).
	if f := e.fulfillment(claim.Name); f.Status.Stages.ApplyStarted == nil {
		t.Error("the apply found again has no recorded start")
	}
	// The apply stops (cancelled); then the destroy removes what it made.
	e.clock.Step(5 * time.Second)
	e.reconcile(claim.Name)
	e.expectRuns(claim.Name, "sim-race1-apply-1=Failed", "sim-race1-destroy-1=Running")
	e.expectCreated("sim-race1-apply-1", "sim-race1-destroy-1")
	e.reconcile(claim.Name)
	test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim.Name}},
		test.Secret(testNamespace, "tfstate-default-sim-race1", nil))
}
