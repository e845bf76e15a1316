// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// DefaultMaxConcurrent bounds the runs in progress of an executor without a Limiter.
const DefaultMaxConcurrent = 4

// Limiter admits new runs. Every executor starts its runs through one (Start): under one lock
// it looks whether the run exists already, counts what is in progress, asks each Budget and
// takes a slot, so two Starts never both take the last slot. The run is then created outside
// the lock: creating one (a runner process, a Job) takes from tens of milliseconds to seconds
// on a busy machine or API server, and a burst's runs must not be created one after another.
// One Limiter may be shared by executors that draw on the same budgets.
//
// The zero Limiter admits DefaultMaxConcurrent runs at once.
//
// A Budget is one thing runs need that is scarce, each refusing with its own reason and the
// numbers in its message: an explicit cap (MaxRuns, FULFILLER_MAX_CONCURRENT_RUNS), the
// machine a local executor runs on (MachineRuns), the cluster's capacity for runner pods
// (ClusterRunners), and the API request budgets the families' clouds enforce (APIBudgets).
type Limiter struct {
	budgets []Budget // nil: MaxRuns(DefaultMaxConcurrent)
	mu      sync.Mutex
	// creating are the runs admitted whose creation is under way, by name. They count as in
	// progress until it ends, whether or not the executor's Load sees them yet.
	creating map[string]struct{}
}

// NewLimiter admits a run when every budget does (none: any run).
func NewLimiter(budgets ...Budget) *Limiter {
	return &Limiter{budgets: append([]Budget{}, budgets...)}
}

// Budget decides whether one more run may start now.
type Budget interface {
	// Admit returns nil when req may start given what is in progress, or an *AdmissionError
	// that says what it waits for.
	Admit(ctx context.Context, req tfrunner.Request, load Load) error
}

// Spender is a Budget that a started run takes something from: Spend is called, under the
// Limiter's lock, once every budget admitted a run, before the run is created (a run whose
// creation fails has spent too).
type Spender interface {
	Spend(req tfrunner.Request)
}

// Load is what an executor has in progress when a run asks to start.
type Load struct {
	// Runs that were started and have not ended, adopted ones included.
	Runs int
}

// AdmissionError: a run may not start now; it is retried later. Reason is the condition
// reason the waiting claim shows (ReasonWaitingForRunner, ReasonWaitingForAPIBudget),
// Message says why, with the numbers. RetryAfter, when set, is when asking again can succeed
// at the earliest. It is ErrBusy.
type AdmissionError struct {
	Reason     string
	Message    string
	RetryAfter time.Duration
}

func (e *AdmissionError) Error() string { return e.Message }

func (e *AdmissionError) Unwrap() error { return ErrBusy }

// StartSteps are an executor's parts of starting one run.
type StartSteps struct {
	// Exists reports whether a run of the request's name exists already (started before, or
	// by another executor on the same store); its error, such as ErrOtherClaimsRun, is Start's.
	Exists func(ctx context.Context) (bool, error)
	// InProgress names the runs the executor has in progress. The Limiter counts them, with
	// the runs it is creating that are not among them yet, as the Load its budgets see.
	InProgress func(ctx context.Context) (map[string]bool, error)
	// Create starts the run.
	Create func(ctx context.Context) error
}

// Start starts the run req unless it exists: an existing run is not started again (Start is
// idempotent), a new one only once every budget admits it. A refused run returns an
// *AdmissionError (ErrBusy).
func (l *Limiter) Start(ctx context.Context, req tfrunner.Request, steps StartSteps) error {
	if admitted, err := l.admit(ctx, req, steps); !admitted || err != nil {
		return err
	}
	err := steps.Create(ctx)
	l.mu.Lock()
	delete(l.creating, req.Name)
	l.mu.Unlock()
	return err
}

// admit decides, under the lock, whether req is a new run every budget admits, and if so
// spends its budgets and counts it as being created.
func (l *Limiter) admit(ctx context.Context, req tfrunner.Request, steps StartSteps) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.creating[req.Name]; ok {
		return false, nil // another Start is creating this run
	}
	if exists, err := steps.Exists(ctx); exists || err != nil {
		return false, err
	}
	running, err := steps.InProgress(ctx)
	if err != nil {
		return false, err
	}
	load := Load{Runs: len(running)}
	for name := range l.creating {
		if !running[name] {
			load.Runs++
		}
	}
	budgets := l.budgets
	if budgets == nil {
		budgets = []Budget{MaxRuns(DefaultMaxConcurrent)}
	}
	for _, b := range budgets {
		if err := b.Admit(ctx, req, load); err != nil {
			return false, fmt.Errorf("starting run %s: %w", req.Name, err)
		}
	}
	for _, b := range budgets {
		if s, ok := b.(Spender); ok {
			s.Spend(req)
		}
	}
	if l.creating == nil {
		l.creating = map[string]struct{}{}
	}
	l.creating[req.Name] = struct{}{}
	return true, nil
}

// waitingForRunner refuses a run because n runs are in progress of a bound of n; why says
// where the bound comes from.
func waitingForRunner(runs, bound int, why string) error {
	return &AdmissionError{Reason: v1alpha1.ReasonWaitingForRunner,
		Message: fmt.Sprintf("%d of %d tofu runs in progress (%s): waiting for a runner", runs, bound, why)}
}

// MaxRuns is an explicit cap on the runs in progress at once (FULFILLER_MAX_CONCURRENT_RUNS).
type MaxRuns int

// Admit implements Budget.
func (m MaxRuns) Admit(_ context.Context, _ tfrunner.Request, load Load) error {
	if load.Runs < int(m) {
		return nil
	}
	return waitingForRunner(load.Runs, int(m), "FULFILLER_MAX_CONCURRENT_RUNS")
}
