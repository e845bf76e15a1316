// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// TestFinalizeWaitsForTheApplyToStop: deleting a claim whose apply runs cancels the apply and
// requeues the claim while the runner stops (no worker waits for it); the destroy starts only
// once the apply has ended.
func TestFinalizeWaitsForTheApplyToStop(t *testing.T) {
	ctx := context.Background()
	kube := test.NewClient(nil)
	clk := clocktesting.NewFakeClock(time.Now())
	exec := fake.New(clk)
	exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Hold: true, StopDelay: 10 * time.Second})
	c := NewController(Options{Kube: kube, APIReader: kube, Clock: clk, Executor: exec, Unavailable: cloudprovider.NewUnavailableOfferings(clk, time.Minute),
		Namespace: "fulfiller", StateNamespace: "fulfiller", TofuPath: "/bin/tofu", ServerVersion: testServerVersion})
	nc := test.TwoTypeClass()
	f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim-a"}}
	f.Spec.NodeClaimUID, f.Spec.StateKey, f.Spec.Module, f.Spec.NodeName = "uid-a", "claim-a", "/m", "claim-a"
	s := &claimState{Claim: run.Claim{F: f, Class: nc, NodeType: &nc.Spec.NodeTypes[0], Conds: f.StatusConditions()}}
	d := c.finalize.(*finalizeStage)
	if _, _, err := d.apply.Drive(ctx, &s.Claim); err != nil {
		t.Fatal(err)
	}
	res, err := d.reconcile(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	cancels := func() int {
		n := 0
		for _, call := range exec.Calls() {
			if call.Method == fake.MethodCancel {
				n++
			}
		}
		return n
	}
	cond := s.Conds.Get(v1alpha1.ConditionDestroyed)
	if res.RequeueAfter != run.PollInterval || cancels() != 1 || len(exec.Created()) != 1 || cond == nil || cond.Reason != v1alpha1.ReasonStoppingApply {
		t.Fatalf("while the apply stops: requeue %s, %d cancels, created %v, Destroyed %+v", res.RequeueAfter, cancels(), exec.Created(), cond)
	}
	clk.Step(10 * time.Second)
	if _, err := d.reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if apply := run.Last(f, tfrunner.Apply); apply.Phase != v1alpha1.RunFailed || apply.ErrorClass != string(tfrunner.Cancelled) {
		t.Errorf("the stopped apply is recorded as %+v", apply)
	}
	// No state was written: nothing to destroy, and the claim may go.
	if !s.removeFinalizer || len(exec.Created()) != 1 {
		t.Errorf("after the apply stopped: removeFinalizer %v, created %v", s.removeFinalizer, exec.Created())
	}
}
