// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// memStore is a store of runs for the limiter: names started, and how many are in progress.
type memStore struct {
	mu      sync.Mutex
	started map[string]bool
}

func (m *memStore) steps(name string) StartSteps {
	return StartSteps{
		Exists: func(context.Context) (bool, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.started[name], nil
		},
		InProgress: func(context.Context) (map[string]bool, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return maps.Clone(m.started), nil
		},
		Create: func(context.Context) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.started[name] = true
			return nil
		},
	}
}

// budgetFunc is a Budget of a function.
type budgetFunc func(tfrunner.Request, Load) error

func (f budgetFunc) Admit(_ context.Context, req tfrunner.Request, load Load) error {
	return f(req, load)
}

// TestLimiterAdmitsUpToItsBudgets: concurrent Starts never take more slots than there are; a
// run that exists is never refused; a refusal names what the run waits for, and a further
// budget refuses with its own reason.
func TestLimiterAdmitsUpToItsBudgets(t *testing.T) {
	ctx := context.Background()
	store := &memStore{started: map[string]bool{}}
	l := NewLimiter(MaxRuns(3))
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			name := fmt.Sprintf("claim-%d-apply-1", i)
			errs[i] = l.Start(ctx, tfrunner.Request{Name: name}, store.steps(name))
		})
	}
	wg.Wait()
	admitted := 0
	for _, err := range errs {
		var refused *AdmissionError
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &refused) && errors.Is(err, ErrBusy) && refused.Reason == v1alpha1.ReasonWaitingForRunner &&
			refused.Message == "3 of 3 tofu runs in progress (FULFILLER_MAX_CONCURRENT_RUNS): waiting for a runner":
		default:
			t.Errorf("refusal %v", err)
		}
	}
	if admitted != 3 || len(store.started) != 3 {
		t.Fatalf("admitted %d, started %d; want 3", admitted, len(store.started))
	}
	for name := range store.started {
		if err := l.Start(ctx, tfrunner.Request{Name: name}, store.steps(name)); err != nil {
			t.Errorf("starting the existing run %s again while full: %v", name, err)
		}
	}

	apiBudget := budgetFunc(func(req tfrunner.Request, _ Load) error {
		if req.Operation == tfrunner.Destroy {
			return nil
		}
		return &AdmissionError{Reason: "WaitingForAPIBudget", Message: "the family's API budget is used up"}
	})
	l = NewLimiter(MaxRuns(10), apiBudget)
	err := l.Start(ctx, tfrunner.Request{Name: "claim-x-apply-1", Operation: tfrunner.Apply}, store.steps("claim-x-apply-1"))
	var refused *AdmissionError
	if !errors.As(err, &refused) || refused.Reason != "WaitingForAPIBudget" {
		t.Errorf("start past the API budget: %v", err)
	}
	if err := l.Start(ctx, tfrunner.Request{Name: "claim-x-destroy-1", Operation: tfrunner.Destroy}, store.steps("claim-x-destroy-1")); err != nil {
		t.Errorf("a destroy the API budget admits: %v", err)
	}

	var zero Limiter
	for i := range DefaultMaxConcurrent + 1 {
		name := fmt.Sprintf("zero-%d-apply-1", i)
		err := zero.Start(ctx, tfrunner.Request{Name: name}, (&memStore{started: map[string]bool{}}).steps(name))
		if err != nil {
			t.Errorf("zero limiter: %v", err)
		}
	}
	full := &memStore{started: map[string]bool{}}
	for i := range DefaultMaxConcurrent {
		full.started[fmt.Sprint(i)] = true
	}
	if err := zero.Start(ctx, tfrunner.Request{Name: "one-more"}, full.steps("one-more")); !errors.Is(err, ErrBusy) {
		t.Errorf("zero limiter past DefaultMaxConcurrent: %v", err)
	}
}

// spendCount is a Spender that counts what it was spent.
type spendCount struct {
	mu    sync.Mutex
	spent int
}

func (c *spendCount) Admit(context.Context, tfrunner.Request, Load) error { return nil }

func (c *spendCount) Spend(tfrunner.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spent++
}

// TestLimiterCreatesOutsideItsLock: runs are created at the same time, not one after another
// (a Create waits here until two are under way), yet a run being created holds its slot
// before the store shows it, is not created twice, and has spent its budgets; a failed
// creation frees its slot.
func TestLimiterCreatesOutsideItsLock(t *testing.T) {
	ctx := context.Background()
	store := &memStore{started: map[string]bool{}}
	spent := &spendCount{}
	l := NewLimiter(MaxRuns(2), spent)
	underWay := make(chan string, 2)
	release := make(chan struct{})
	creates := map[string]int{}
	var mu sync.Mutex
	slow := func(name string, fail bool) StartSteps {
		steps := store.steps(name)
		create := steps.Create
		steps.Create = func(ctx context.Context) error {
			mu.Lock()
			creates[name]++
			mu.Unlock()
			underWay <- name
			<-release
			if fail {
				return errors.New("no such binary")
			}
			return create(ctx)
		}
		return steps
	}
	errs := make(chan error, 2)
	go func() { errs <- l.Start(ctx, tfrunner.Request{Name: "a-apply-1"}, slow("a-apply-1", false)) }()
	go func() { errs <- l.Start(ctx, tfrunner.Request{Name: "b-apply-1"}, slow("b-apply-1", true)) }()
	for range 2 {
		select {
		case <-underWay:
		case <-time.After(10 * time.Second):
			t.Fatal("the second run was not created while the first one was")
		}
	}
	// Both slots are taken by runs the store does not show yet.
	if err := l.Start(ctx, tfrunner.Request{Name: "c-apply-1"}, store.steps("c-apply-1")); !errors.Is(err, ErrBusy) ||
		err.Error() != "starting run c-apply-1: 2 of 2 tofu runs in progress (FULFILLER_MAX_CONCURRENT_RUNS): waiting for a runner" {
		t.Errorf("a third run while two are being created: %v", err)
	}
	if err := l.Start(ctx, tfrunner.Request{Name: "a-apply-1"}, slow("a-apply-1", false)); err != nil {
		t.Errorf("starting a run that is being created: %v", err)
	}
	if spent.spent != 2 {
		t.Errorf("the budgets were spent %d times for the two runs being created, want 2", spent.spent)
	}
	close(release)
	var failed int
	for range 2 {
		if err := <-errs; err != nil {
			failed++
		}
	}
	if failed != 1 || creates["a-apply-1"] != 1 || creates["b-apply-1"] != 1 {
		t.Errorf("%d failed, creates %v; want 1 failed, each created once", failed, creates)
	}
	// The failed creation gave its slot back.
	if err := l.Start(ctx, tfrunner.Request{Name: "c-apply-1"}, store.steps("c-apply-1")); err != nil {
		t.Errorf("a run after a failed creation: %v", err)
	}
}
