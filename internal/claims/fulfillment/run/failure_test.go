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
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// The documented mapping (docs/concepts.md, "Phases, failures and retries").
func TestDecideApplyFailure(t *testing.T) {
	for _, tc := range []struct {
		class                  tfrunner.ErrorClass
		reason                 string
		retry, markUnavailable bool
	}{
		{tfrunner.Capacity, "InsufficientCapacity", false, true},
		{tfrunner.Quota, "QuotaExceeded", false, true},
		{tfrunner.InvalidModule, "InvalidModule", false, true},
		{tfrunner.Credentials, "InvalidCredentials", false, true},
		{tfrunner.LockHeld, "StateLocked", true, false},
		{tfrunner.Transient, "TransientError", true, false},
		{tfrunner.Timeout, "Timeout", true, false},
		{tfrunner.Unknown, "Unknown", true, false},
		{"", "Unknown", true, false},
		{tfrunner.Cancelled, "Cancelled", false, false},
	} {
		got := DecideApplyFailure(tc.class)
		if got.Reason != tc.reason || got.Retry != tc.retry || got.MarkUnavailable != tc.markUnavailable {
			t.Errorf("DecideApplyFailure(%q) = %+v, want reason %s retry=%v markUnavailable=%v", tc.class, got, tc.reason, tc.retry, tc.markUnavailable)
		}
	}
}

// A failed apply's class becomes the Fulfillment's Applied reason, with the run's message;
// the decision's other parts show as the condition's status, the claim's replacement and the
// offering's availability.
func TestApplyFailureCondition(t *testing.T) {
	for _, class := range []tfrunner.ErrorClass{tfrunner.Capacity, tfrunner.Quota, tfrunner.InvalidModule, tfrunner.Credentials,
		tfrunner.LockHeld, tfrunner.Transient, tfrunner.Timeout, tfrunner.Cancelled, tfrunner.Unknown} {
		for _, attempt := range []int{1, 3} {
			clk := clocktesting.NewFakeClock(time.Now())
			unavailable := marked{}
			r := New(Options{Clock: clk, Unavailable: unavailable})
			f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim-a"}}
			f.Spec.NodeType, f.Spec.Zone, f.Spec.CapacityType = "small", "a", "on-demand"
			c := &Claim{F: f, Conds: f.StatusConditions()}
			for i := 1; i <= attempt; i++ { // the runs this claim made
				f.Status.Runs = append(f.Status.Runs, v1alpha1.Run{Name: fmt.Sprintf("claim-a-apply-%d", i), Operation: "apply", Attempt: i, Phase: v1alpha1.RunFailed,
					ErrorClass: string(class), Message: "the message of the run"})
			}
			run := &f.Status.Runs[len(f.Status.Runs)-1]
			if _, err := applyDriver(r).failed(context.Background(), c, run); err != nil {
				t.Fatal(err)
			}
			want := DecideApplyFailure(class)
			cond := c.Conds.Get(v1alpha1.ConditionApplied)
			retrying := want.Retry && attempt < 3
			if cond == nil || cond.Reason != string(class) || !strings.HasPrefix(cond.Message, "the message of the run") {
				t.Fatalf("%s attempt %d: Applied = %+v", class, attempt, cond)
			}
			if cond.IsUnknown() != retrying || cond.IsFalse() == retrying || c.Replace == retrying {
				t.Errorf("%s attempt %d: Applied %s, replace=%v; want retrying=%v", class, attempt, cond.Status, c.Replace, retrying)
			}
			if got := unavailable.IsUnavailable("small", "a", "on-demand"); got != want.MarkUnavailable {
				t.Errorf("%s: offering unavailable = %v, want %v", class, got, want.MarkUnavailable)
			}
			if len(c.Events) != 1 || c.Events[0].Reason != string(class) {
				t.Errorf("%s: events %+v", class, c.Events)
			}
		}
	}
}
