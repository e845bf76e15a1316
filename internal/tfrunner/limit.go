package tfrunner

import (
	"context"
	"fmt"
	"sync"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// DefaultMaxConcurrent bounds the runs in progress of an executor without a Limiter.
const DefaultMaxConcurrent = 4

// Limiter admits new runs. Every executor starts its runs through one (Start): under one lock
// it looks whether the run exists already, counts what is in progress, asks each Budget, and
// only then creates the run, so two Starts never both take the last slot. One Limiter may be
// shared by executors that draw on the same budgets.
//
// The zero Limiter admits DefaultMaxConcurrent runs at once.
//
// A Budget is one thing runs need that is scarce. Today that is runner slots (MaxRuns, from
// FULFILLER_MAX_CONCURRENT_RUNS); the runner capacity of the cluster, local CPU or a
// family's API budget are further Budgets, each refusing with its own reason (such as
// WaitingForAPIBudget), and Load grows what they need to know.
type Limiter struct {
	budgets []Budget // nil: MaxRuns(DefaultMaxConcurrent)
	mu      sync.Mutex
}

// NewLimiter admits a run when every budget does (none: any run).
func NewLimiter(budgets ...Budget) *Limiter {
	return &Limiter{budgets: append([]Budget{}, budgets...)}
}

// Budget decides whether one more run may start now.
type Budget interface {
	// Admit returns nil when req may start given what is in progress, or an *AdmissionError
	// that says what it waits for.
	Admit(ctx context.Context, req Request, load Load) error
}

// Load is what an executor has in progress when a run asks to start.
type Load struct {
	// Runs that were started and have not ended, adopted ones included.
	Runs int
}

// AdmissionError: a run may not start now; it is retried later. Reason is the condition
// reason the waiting claim shows (ReasonWaitingForRunner, ...), Message says why. It is
// ErrBusy.
type AdmissionError struct {
	Reason  string
	Message string
}

func (e *AdmissionError) Error() string { return e.Message }

func (e *AdmissionError) Unwrap() error { return ErrBusy }

// MaxRuns bounds how many runs are in progress at once.
type MaxRuns int

// Admit implements Budget.
func (m MaxRuns) Admit(_ context.Context, _ Request, load Load) error {
	if load.Runs < int(m) {
		return nil
	}
	return &AdmissionError{Reason: v1alpha1.ReasonWaitingForRunner,
		Message: fmt.Sprintf("%d of %d tofu runs in progress: waiting for a runner", load.Runs, int(m))}
}

// StartSteps are an executor's parts of starting one run.
type StartSteps struct {
	// Exists reports whether a run of the request's name exists already (started before, or
	// by another executor on the same store); its error, such as ErrOtherClaimsRun, is Start's.
	Exists func(ctx context.Context) (bool, error)
	// Load counts what the executor has in progress.
	Load func(ctx context.Context) (Load, error)
	// Create starts the run.
	Create func(ctx context.Context) error
}

// Start starts the run req unless it exists: an existing run is not started again (Start is
// idempotent), a new one only once every budget admits it. A refused run returns an
// *AdmissionError (ErrBusy).
func (l *Limiter) Start(ctx context.Context, req Request, steps StartSteps) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if exists, err := steps.Exists(ctx); exists || err != nil {
		return err
	}
	load, err := steps.Load(ctx)
	if err != nil {
		return err
	}
	budgets := l.budgets
	if budgets == nil {
		budgets = []Budget{MaxRuns(DefaultMaxConcurrent)}
	}
	for _, b := range budgets {
		if err := b.Admit(ctx, req, load); err != nil {
			return fmt.Errorf("starting run %s: %w", req.Name, err)
		}
	}
	return steps.Create(ctx)
}
