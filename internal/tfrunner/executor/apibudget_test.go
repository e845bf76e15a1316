// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestAPIBudgets: a budget starts full, admits runs while it holds their estimate, is spent
// only by runs that start, refills at the cloud's rate, and is shared by runs that name it.
func TestAPIBudgets(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	demand := func(req tfrunner.Request) []APIDemand {
		switch req.Family {
		case "cloud":
			return []APIDemand{{Budget: "project " + req.Env["TOKEN"], Limit: 3600, Per: time.Hour, Requests: map[tfrunner.Operation]int{tfrunner.Apply: 1000, tfrunner.Destroy: 500}[req.Operation]}}
		case "huge":
			return []APIDemand{{Budget: "huge", Limit: 10, Per: time.Hour, Requests: 50}}
		}
		return nil
	}
	budgets := NewAPIBudgets(clk, demand)
	store := &memStore{started: map[string]bool{}}
	l := NewLimiter(budgets)
	ctx := context.Background()
	req := func(name, family, token string, op tfrunner.Operation) tfrunner.Request {
		return tfrunner.Request{Name: name, Family: family, Operation: op, Env: map[string]string{"TOKEN": token}}
	}
	start := func(r tfrunner.Request) error { return l.Start(ctx, r, store.steps(r.Name)) }
	for i := range 3 {
		if err := start(req(fmt.Sprintf("a-%d-apply-1", i), "cloud", "one", tfrunner.Apply)); err != nil {
			t.Fatalf("apply %d of a full budget: %v", i, err)
		}
	}
	err := start(req("a-3-apply-1", "cloud", "one", tfrunner.Apply))
	var refused *AdmissionError
	if !errors.As(err, &refused) || !errors.Is(err, ErrBusy) || refused.Reason != v1alpha1.ReasonWaitingForAPIBudget || refused.RetryAfter != 400*time.Second ||
		refused.Message != "project one allows 3600 API requests per hour; 600 are left for runs, and one apply makes about 1000: enough again in 6m40s" {
		t.Fatalf("past the budget: %v (%+v)", err, refused)
	}
	if err := start(req("a-0-destroy-1", "cloud", "one", tfrunner.Destroy)); err != nil {
		t.Errorf("a destroy within what is left: %v", err)
	}
	if err := start(req("b-0-apply-1", "cloud", "two", tfrunner.Apply)); err != nil {
		t.Errorf("another project's budget: %v", err)
	}
	if err := start(req("c-0-apply-1", "", "", tfrunner.Apply)); err != nil {
		t.Errorf("a run without demands: %v", err)
	}
	clk.Step(899 * time.Second) // 100 + 899 left
	if err := start(req("a-3-apply-1", "cloud", "one", tfrunner.Apply)); !errors.Is(err, ErrBusy) {
		t.Errorf("one request short: %v", err)
	}
	clk.Step(time.Second)
	if err := start(req("a-3-apply-1", "cloud", "one", tfrunner.Apply)); err != nil {
		t.Errorf("refilled: %v", err)
	}
	if err := start(req("a-3-apply-1", "cloud", "one", tfrunner.Apply)); err != nil {
		t.Errorf("an existing run is not admitted again: %v", err)
	}

	// A run another budget refuses spends nothing.
	l = NewLimiter(budgets, MaxRuns(0))
	clk.Step(time.Hour)
	if err := l.Start(ctx, req("b-1-apply-1", "cloud", "two", tfrunner.Apply), store.steps("b-1-apply-1")); !errors.Is(err, ErrBusy) {
		t.Fatalf("refused by the cap: %v", err)
	}
	l = NewLimiter(budgets)
	for i := range 3 {
		name := fmt.Sprintf("b-%d-apply-2", i)
		if err := l.Start(ctx, req(name, "cloud", "two", tfrunner.Apply), store.steps(name)); err != nil {
			t.Errorf("apply %d after a refusal elsewhere: %v", i, err)
		}
	}
	// A run that needs more than the whole budget waits for it to be full.
	if err := start(req("h-0-apply-1", "huge", "", tfrunner.Apply)); err != nil {
		t.Errorf("an estimate above the limit, full budget: %v", err)
	}
	if err := start(req("h-1-apply-1", "huge", "", tfrunner.Apply)); !errors.Is(err, ErrBusy) {
		t.Errorf("an estimate above the limit, empty budget: %v", err)
	}
}

// TestAPIBudgetsTakeRequestsOutsideRuns: requests made outside runs (the orphan collector's)
// are taken from the budget they count in, and the runs admitted after see what is left.
func TestAPIBudgetsTakeRequestsOutsideRuns(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	project := APIDemand{Budget: "project one", Limit: 3600, Per: time.Hour}
	budgets := NewAPIBudgets(clk, func(tfrunner.Request) []APIDemand {
		d := project
		d.Requests = 20
		return []APIDemand{d}
	})
	for range 3590 {
		budgets.Take(APIDemand{Budget: project.Budget, Limit: project.Limit, Per: project.Per, Requests: 1})
	}
	if left := budgets.Left(project); left != 10 {
		t.Fatalf("left %v after 3590 requests, want 10", left)
	}
	err := budgets.Admit(context.Background(), tfrunner.Request{Name: "a-apply-1", Operation: tfrunner.Apply}, Load{})
	var refused *AdmissionError
	if !errors.As(err, &refused) || refused.RetryAfter != 10*time.Second {
		t.Fatalf("a run of 20 with 10 left: %v, want refused for 10s", err)
	}
	clk.Step(10 * time.Second)
	if err := budgets.Admit(context.Background(), tfrunner.Request{Name: "a-apply-1", Operation: tfrunner.Apply}, Load{}); err != nil {
		t.Errorf("after the refill: %v", err)
	}
}

// TestAPIBudgetsMetrics: the gauges show each budget drawn on as it is at the scrape, refilled
// by the clock, with its limit.
func TestAPIBudgetsMetrics(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	budgets := NewAPIBudgets(clk, nil)
	budgets.Take(APIDemand{Budget: "the Hetzner Cloud project of token 0a1b2c3d", Limit: 3600, Per: time.Hour, Requests: 1000})
	clk.Step(100 * time.Second)
	want := `
# HELP fulfiller_api_budget_requests_left Requests the fulfiller's runs may still make against a cloud API's rate limit (its own estimate: other clients of the same credentials are not seen), by budget: a family's name for it, a Hetzner Cloud project by a hash of its token, never the token.
# TYPE fulfiller_api_budget_requests_left gauge
fulfiller_api_budget_requests_left{budget="the Hetzner Cloud project of token 0a1b2c3d"} 2700
# HELP fulfiller_api_budget_requests_limit The cloud API's rate limit of a budget: requests per its period, which refill evenly.
# TYPE fulfiller_api_budget_requests_limit gauge
fulfiller_api_budget_requests_limit{budget="the Hetzner Cloud project of token 0a1b2c3d",period="hour"} 3600
`
	if err := testutil.CollectAndCompare(budgets, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
