package tfrunner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
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
		Load: func(context.Context) (Load, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return Load{Runs: len(m.started)}, nil
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
type budgetFunc func(Request, Load) error

func (f budgetFunc) Admit(_ context.Context, req Request, load Load) error { return f(req, load) }

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
			errs[i] = l.Start(ctx, Request{Name: name}, store.steps(name))
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
			refused.Message == "3 of 3 tofu runs in progress: waiting for a runner":
		default:
			t.Errorf("refusal %v", err)
		}
	}
	if admitted != 3 || len(store.started) != 3 {
		t.Fatalf("admitted %d, started %d; want 3", admitted, len(store.started))
	}
	for name := range store.started {
		if err := l.Start(ctx, Request{Name: name}, store.steps(name)); err != nil {
			t.Errorf("starting the existing run %s again while full: %v", name, err)
		}
	}

	apiBudget := budgetFunc(func(req Request, _ Load) error {
		if req.Operation == Destroy {
			return nil
		}
		return &AdmissionError{Reason: "WaitingForAPIBudget", Message: "the family's API budget is used up"}
	})
	l = NewLimiter(MaxRuns(10), apiBudget)
	err := l.Start(ctx, Request{Name: "claim-x-apply-1", Operation: Apply}, store.steps("claim-x-apply-1"))
	var refused *AdmissionError
	if !errors.As(err, &refused) || refused.Reason != "WaitingForAPIBudget" {
		t.Errorf("start past the API budget: %v", err)
	}
	if err := l.Start(ctx, Request{Name: "claim-x-destroy-1", Operation: Destroy}, store.steps("claim-x-destroy-1")); err != nil {
		t.Errorf("a destroy the API budget admits: %v", err)
	}

	var zero Limiter
	for i := range DefaultMaxConcurrent + 1 {
		name := fmt.Sprintf("zero-%d-apply-1", i)
		err := zero.Start(ctx, Request{Name: name}, (&memStore{started: map[string]bool{}}).steps(name))
		if err != nil {
			t.Errorf("zero limiter: %v", err)
		}
	}
	full := &memStore{started: map[string]bool{}}
	for i := range DefaultMaxConcurrent {
		full.started[fmt.Sprint(i)] = true
	}
	if err := zero.Start(ctx, Request{Name: "one-more"}, full.steps("one-more")); !errors.Is(err, ErrBusy) {
		t.Errorf("zero limiter past DefaultMaxConcurrent: %v", err)
	}
}
