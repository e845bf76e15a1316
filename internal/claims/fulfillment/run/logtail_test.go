// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// TestFailedRunKeepsItsLogTail: a failed run's record keeps the end of its log, rendered and
// bounded, and keeps it after the executor has forgotten the run (its Job deleted); a
// successful run keeps none; a log that cannot be read leaves a note and the claim goes on.
func TestFailedRunKeepsItsLogTail(t *testing.T) {
	ctx := context.Background()
	kube := test.NewClient(nil)
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC))
	exec := fake.New(clk)
	var log strings.Builder
	for range 200 {
		log.WriteString(`{"@level":"info","@message":"terraform_data.machine: Still creating...","@module":"tofu.ui","@timestamp":"2026-12-02T17:59:00Z","type":"apply_progress"}` + "\n")
	}
	log.WriteString(`{"@level":"error","@message":"Error: resource_unavailable","@module":"tofu.ui","@timestamp":"2026-12-02T17:59:58Z","diagnostic":{"severity":"error","summary":"resource_unavailable","detail":"server type cx22 is sold out in fsn1"},"type":"diagnostic"}` + "\n")
	exec.Script("claim-a-apply-1", fake.Outcome{Error: &tfrunner.RunError{Class: tfrunner.Transient, Message: "resource_unavailable"}, Log: log.String()})
	exec.Script("claim-a-apply-2", fake.Outcome{Error: &tfrunner.RunError{Class: tfrunner.Transient, Message: "timeout"}})
	r := New(Options{Kube: kube, APIReader: kube, Clock: clk, Executor: exec, Unavailable: marked{}, Namespace: "fulfiller", StateNamespace: "fulfiller", TofuPath: "/bin/tofu"})
	nc := test.TwoTypeClass()
	f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim-a"}}
	f.Spec.NodeClaimUID, f.Spec.StateKey, f.Spec.Module, f.Spec.NodeName = "uid-a", "claim-a", "/m", "claim-a"
	c := &Claim{F: f, Class: nc, NodeType: &nc.Spec.NodeTypes[0], Conds: f.StatusConditions()}
	d := applyDriver(r)
	drive := func() {
		t.Helper()
		if _, _, err := d.Drive(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	drive() // starts attempt 1
	drive() // it failed
	first := f.Status.Runs[0]
	if first.Phase != v1alpha1.RunFailed || len(first.LogTail) > tfrunner.MaxLogTail {
		t.Fatalf("first run %s: %s, a tail of %d bytes", first.Name, first.Phase, len(first.LogTail))
	}
	wantEnd := "17:59:58Z error Error: resource_unavailable\n    server type cx22 is sold out in fsn1"
	if !strings.HasSuffix(first.LogTail, wantEnd) || !strings.HasPrefix(first.LogTail, "(earlier lines left out)\n17:59:00Z info terraform_data.machine: Still creating...") {
		t.Errorf("first run's log tail:\n%s\nwant it to end with:\n%s", first.LogTail, wantEnd)
	}
	exec.Lose("claim-a-apply-1") // its Job is deleted
	clk.Step(time.Minute)
	drive() // starts attempt 2
	if got := f.Status.Runs[0].LogTail; got != first.LogTail {
		t.Errorf("after the runner is gone the first run's tail is %q", got)
	}
	exec.Fail(fake.MethodLogTail, "claim-a-apply-2", errors.New("the API server refused the log request"), 1)
	drive() // it failed; its log cannot be read
	second := f.Status.Runs[1]
	if second.Phase != v1alpha1.RunFailed || !strings.Contains(second.LogTail, "could not be read: the API server refused the log request") {
		t.Errorf("second run: %s, tail %q", second.Phase, second.LogTail)
	}
	clk.Step(time.Minute)
	drive() // attempt 3 starts and succeeds
	drive()
	if third := Last(f, tfrunner.Apply); third.Phase != v1alpha1.RunSucceeded || third.LogTail != "" {
		t.Errorf("third run: %s, tail %q", third.Phase, third.LogTail)
	}
}
