// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// TestRunNameTakenByAnEarlierClaim: a claim deleted and made again under the same name finds
// its first run names taken by the earlier claim's runs (their Jobs stay for their logs): it
// never adopts them, and runs under the next free attempt's name instead, labelled with its
// own UID.
func TestRunNameTakenByAnEarlierClaim(t *testing.T) {
	ctx := context.Background()
	kube := test.NewClient(nil)
	clk := clocktesting.NewFakeClock(time.Now())
	exec := fake.New(clk)
	for _, taken := range []string{"claim-a-apply-1", "claim-a-apply-2", "claim-a-destroy-1"} {
		exec.Fail(fake.MethodStart, taken, fmt.Errorf("run %s: %w", taken, executor.ErrOtherClaimsRun), -1)
	}
	r := New(Options{Kube: kube, APIReader: kube, Clock: clk, Executor: exec, Unavailable: marked{}, Namespace: "fulfiller", StateNamespace: "fulfiller", TofuPath: "/bin/tofu"})
	nc := test.TwoTypeClass()
	f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim-a"}}
	f.Spec.NodeClaimUID, f.Spec.StateKey, f.Spec.Module, f.Spec.NodeName = "uid-new", "claim-a", "/m", "claim-a"
	c := &Claim{F: f, Class: nc, NodeType: &nc.Spec.NodeTypes[0], Conds: f.StatusConditions()}
	if _, err := applyDriver(r).start(ctx, c, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := destroyDriver(r).start(ctx, c, 1, true); err != nil {
		t.Fatal(err)
	}
	names := exec.Created()
	for _, name := range names {
		req, _ := exec.Request(name)
		if req.Labels[keys.LabelNodeClaimUID] != "uid-new" || req.Labels[keys.LabelNodeClaim] != "claim-a" {
			t.Errorf("run %s labels %v", req.Name, req.Labels)
		}
	}
	if strings.Join(names, ",") != "claim-a-apply-3,claim-a-destroy-2" {
		t.Fatalf("started %v, want the first names no earlier claim has", names)
	}
	if apply := Last(f, tfrunner.Apply); apply == nil || apply.Name != "claim-a-apply-3" || apply.Attempt != 3 || func() bool { made, _ := attempts(f, tfrunner.Apply); return made != 1 }() {
		t.Errorf("recorded apply %+v", apply)
	}
	if destroy := Last(f, tfrunner.Destroy); destroy == nil || destroy.Name != "claim-a-destroy-2" {
		t.Errorf("recorded destroy %+v", destroy)
	}
}
