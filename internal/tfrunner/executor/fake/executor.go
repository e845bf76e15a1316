// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package fake is an in-memory executor.Executor for tests of what drives runs: runs end as
// scripted (per run name or per operation), errors can be injected into any call, and every
// call is logged. It admits runs through a executor.Limiter, as the real executors do, and
// passes the executor contract suite where the contract does not need tofu itself
// (executor/fake_contract_test.go). Only tests import it.
package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// Executor is an in-memory executor. Its zero value is not usable: make one with New.
type Executor struct {
	clock clock.PassiveClock
	// Limiter admits new runs (default: its own, executor.DefaultMaxConcurrent at once).
	Limiter *executor.Limiter
	// CancelledGone makes a cancelled run disappear once it has stopped (Status reports
	// ErrRunNotFound), as a runner Job does; otherwise it ends Failed with class Cancelled, as
	// a local run does.
	CancelledGone bool

	own executor.Limiter

	mu       sync.Mutex
	runs     map[string]*run
	byName   map[string]Outcome
	byOp     map[tfrunner.Operation]Outcome
	failures []*failure
	calls    []Call
	created  []string
}

var (
	_ executor.Executor       = (*Executor)(nil)
	_ executor.LockAttributor = (*Executor)(nil)
	_ executor.LogTailer      = (*Executor)(nil)
)

// New returns an executor whose runs take their times from clk (start, deadlines, how long a
// cancelled run takes to stop). By default every run succeeds at the first Status call.
func New(clk clock.PassiveClock) *Executor {
	e := &Executor{clock: clk}
	e.Reset()
	return e
}

// Outcome is how a scripted run goes.
type Outcome struct {
	// Polls is how many Status calls see the run Running before it ends (0: the first one
	// sees it ended).
	Polls int
	// Hold keeps the run Running until Finish, Cancel or its request's deadline.
	Hold bool
	// Progress is what Status reports while the run goes on.
	Progress string
	// EndReported is what Status says of a run going on: that its end will be reported.
	EndReported bool
	// Error, when set, fails the run with it; otherwise the run succeeds.
	Error *tfrunner.RunError
	// ProviderID and Addresses of a successful apply (default ProviderID:
	// "fake://<node_name variable>").
	ProviderID string
	Addresses  []string
	// StopDelay is how long, by the clock, a cancelled run reports RunStopping before it has
	// ended.
	StopDelay time.Duration
	// Log is the run's log as its runner would write it (tofu's -json lines), what LogTail
	// returns.
	Log string
}

// Fails returns an outcome that fails with class and message.
func Fails(class tfrunner.ErrorClass, message string) Outcome {
	return Outcome{Error: &tfrunner.RunError{Class: class, Message: message}}
}

// Method names a method of the executor in the call log and in injected errors.
type Method string

const (
	MethodStart   Method = "Start"
	MethodStatus  Method = "Status"
	MethodCancel  Method = "Cancel"
	MethodLogTail Method = "LogTail"
)

// Call is one call of the executor.
type Call struct {
	Method Method
	Run    string
	// ClaimUID of a Status or Cancel call; of a Start, the request's claim UID label.
	ClaimUID string
	// Request of a Start call, as it was given.
	Request *tfrunner.Request
	// Err is what the call returned.
	Err error
}

type failure struct {
	method Method
	match  string // a run name or an operation
	err    error
	times  int // left; <0: always
}

type run struct {
	req       tfrunner.Request
	hasReq    bool // the request (user data, credentials) is still stored
	outcome   Outcome
	started   time.Time
	polls     int
	cancelled *time.Time
	result    *tfrunner.Result
}

// Reset forgets every run, script, injected error and call.
func (e *Executor) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = map[string]*run{}
	e.byName = map[string]Outcome{}
	e.byOp = map[tfrunner.Operation]Outcome{}
	e.failures, e.calls, e.created = nil, nil, nil
}

// Script sets how the run of that name goes; it wins over ScriptOperation.
func (e *Executor) Script(name string, o Outcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byName[name] = o
}

// ScriptOperation sets how runs of op go.
func (e *Executor) ScriptOperation(op tfrunner.Operation, o Outcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byOp[op] = o
}

// Fail makes the next times calls of m for a run name or an operation (match) return err
// (times < 0: every call). A failed Start starts nothing.
func (e *Executor) Fail(m Method, match string, err error, times int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failures = append(e.failures, &failure{method: m, match: match, err: err, times: times})
}

// Finish ends a run that goes on (a held one) with its outcome now.
func (e *Executor) Finish(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.runs[name]
	if !ok {
		return fmt.Errorf("run %s: %w", name, executor.ErrRunNotFound)
	}
	if r.result == nil && r.cancelled == nil {
		e.end(r)
	}
	return nil
}

// Lose forgets a run, as an executor that lost it before it began (or whose store was wiped).
func (e *Executor) Lose(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.runs, name)
}

// Calls returns the call log, oldest first.
func (e *Executor) Calls() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Call(nil), e.calls...)
}

// Created names the runs that were created, in order: a name shows once however often it
// was started.
func (e *Executor) Created() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.created...)
}

// InProgress counts the runs that have not ended.
func (e *Executor) InProgress() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inProgress()
}

// HasRequest reports whether the run's request (user data, credentials) is still stored: a
// finished run's is removed, as the contract demands.
func (e *Executor) HasRequest(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.runs[name]
	return ok && r.hasReq
}

// Request returns the request a run was started with, for tests to look at (the fake keeps
// it after the run, unlike HasRequest says for the contract).
func (e *Executor) Request(name string) (tfrunner.Request, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.runs[name]
	if !ok {
		return tfrunner.Request{}, false
	}
	return r.req, true
}

// Start implements executor.Executor.
func (e *Executor) Start(ctx context.Context, req tfrunner.Request) (err error) {
	req.WorkDir = "/fake/runs/" + req.Name
	logged := req
	logged.Labels = maps.Clone(req.Labels)
	defer func() {
		e.log(Call{Method: MethodStart, Run: req.Name, ClaimUID: req.Labels[keys.LabelNodeClaimUID], Request: &logged, Err: err})
	}()
	if err := e.injected(MethodStart, req.Name, req.Operation); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	return e.limiter().Start(ctx, req, executor.StartSteps{
		Exists: func(context.Context) (bool, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			r, ok := e.runs[req.Name]
			if !ok {
				return false, nil
			}
			return true, executor.CheckOwner(req.Name, r.req.Labels, req.Labels[keys.LabelNodeClaimUID])
		},
		InProgress: func(context.Context) (map[string]bool, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.inProgressNames(), nil
		},
		Create: func(context.Context) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			o, ok := e.byName[req.Name]
			if !ok {
				o = e.byOp[req.Operation]
			}
			e.runs[req.Name] = &run{req: req, hasReq: true, outcome: o, started: e.clock.Now()}
			e.created = append(e.created, req.Name)
			return nil
		},
	})
}

func (e *Executor) limiter() *executor.Limiter {
	if e.Limiter != nil {
		return e.Limiter
	}
	return &e.own
}

// Status implements executor.Executor. A run ends when a Status call finds its outcome due.
func (e *Executor) Status(_ context.Context, name, claimUID string) (st executor.RunStatus, err error) {
	defer func() { e.log(Call{Method: MethodStatus, Run: name, ClaimUID: claimUID, Err: err}) }()
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.runs[name]
	if ok {
		err = e.injectedLocked(MethodStatus, name, r.req.Operation)
	} else {
		err = e.injectedLocked(MethodStatus, name, "")
	}
	if err != nil {
		return executor.RunStatus{}, err
	}
	if !ok {
		return executor.RunStatus{}, fmt.Errorf("run %s: %w", name, executor.ErrRunNotFound)
	}
	if err := executor.CheckOwner(name, r.req.Labels, claimUID); err != nil {
		return executor.RunStatus{}, err
	}
	st = executor.RunStatus{Name: name, Phase: executor.RunRunning, LogPath: "fake/" + name, StartTime: r.started}
	e.settle(r)
	switch {
	case r.result != nil && r.cancelled != nil && e.CancelledGone:
		delete(e.runs, name)
		return executor.RunStatus{}, fmt.Errorf("run %s: %w", name, executor.ErrRunNotFound)
	case r.result != nil:
	case r.cancelled != nil:
		st.Phase = executor.RunStopping
		return st, nil
	default:
		r.polls++
		if r.outcome.Hold || r.polls <= r.outcome.Polls {
			st.Progress, st.EndReported = r.outcome.Progress, r.outcome.EndReported
			return st, nil
		}
		e.end(r)
	}
	res := *r.result
	st.Result = &res
	st.Phase = executor.RunFailed
	if res.Succeeded {
		st.Phase = executor.RunSucceeded
	}
	return st, nil
}

// Cancel implements executor.Executor: it returns at once; the run reports RunStopping for
// its outcome's StopDelay, then it has ended.
func (e *Executor) Cancel(_ context.Context, name, claimUID string) (err error) {
	defer func() { e.log(Call{Method: MethodCancel, Run: name, ClaimUID: claimUID, Err: err}) }()
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.runs[name]
	op := tfrunner.Operation("")
	if ok {
		op = r.req.Operation
	}
	if err := e.injectedLocked(MethodCancel, name, op); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("run %s: %w", name, executor.ErrRunNotFound)
	}
	if err := executor.CheckOwner(name, r.req.Labels, claimUID); err != nil {
		return err
	}
	if e.settle(r); r.result == nil && r.cancelled == nil {
		now := e.clock.Now()
		r.cancelled = &now
	}
	return nil
}

// LogTail implements executor.LogTailer: the run's scripted Log, while the executor knows the
// run (Lose forgets it, as a deleted Job).
func (e *Executor) LogTail(_ context.Context, name, claimUID string) (_ []byte, err error) {
	defer func() { e.log(Call{Method: MethodLogTail, Run: name, ClaimUID: claimUID, Err: err}) }()
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.runs[name]
	op := tfrunner.Operation("")
	if ok {
		op = r.req.Operation
	}
	if err := e.injectedLocked(MethodLogTail, name, op); err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("run %s: %w", name, executor.ErrRunNotFound)
	}
	if err := executor.CheckOwner(name, r.req.Labels, claimUID); err != nil {
		return nil, err
	}
	return []byte(r.outcome.Log), nil
}

// AttributeLock implements executor.LockAttributor as runner pods are attributed: a fake
// run's host name is its name. A lock of a run this executor does not know (lost) or that
// has ended was left by a runner that is gone.
func (e *Executor) AttributeLock(_ context.Context, owner executor.LockOwner, runs []string) (executor.Attribution, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	host := owner.Host()
	for _, name := range runs {
		if name != host {
			continue
		}
		r, ok := e.runs[name]
		if ok {
			e.settle(r)
		}
		switch {
		case !ok:
			return executor.Attribution{Run: name, Gone: true, Detail: "fake run " + name + " no longer exists"}, nil
		case r.result != nil:
			return executor.Attribution{Run: name, Gone: true, Detail: "fake run " + name + " has ended"}, nil
		default:
			return executor.Attribution{Run: name, Detail: "fake run " + name + " is running"}, nil
		}
	}
	return executor.Attribution{}, nil
}

// settle ends a run whose end is due by the clock: a cancelled run once its stop delay has
// passed, and a run past its request's deadline.
func (e *Executor) settle(r *run) {
	switch {
	case r.result != nil:
	case r.cancelled != nil:
		if e.clock.Since(*r.cancelled) >= r.outcome.StopDelay {
			e.endWith(r, &tfrunner.RunError{Class: tfrunner.Cancelled, Message: "run cancelled"})
		}
	case r.req.Deadline > 0 && e.clock.Since(r.started) >= r.req.Deadline:
		e.endWith(r, &tfrunner.RunError{Class: tfrunner.Timeout, Message: "run deadline exceeded"})
	}
}

func (e *Executor) inProgress() int { return len(e.inProgressNames()) }

// inProgressNames are the runs that have not ended, by name.
func (e *Executor) inProgressNames() map[string]bool {
	names := map[string]bool{}
	for name, r := range e.runs {
		if e.settle(r); r.result == nil {
			names[name] = true
		}
	}
	return names
}

// end finishes r with its outcome.
func (e *Executor) end(r *run) {
	if r.outcome.Error != nil {
		e.endWith(r, r.outcome.Error)
		return
	}
	res := &tfrunner.Result{Operation: r.req.Operation, Succeeded: true, Started: r.started, Finished: e.clock.Now()}
	if r.req.Operation == tfrunner.Apply {
		node, _ := r.req.Variables[tfrunner.VarNodeName].(string)
		res.ProviderID, res.NodeName, res.Addresses = r.outcome.ProviderID, node, r.outcome.Addresses
		if res.ProviderID == "" {
			res.ProviderID = "fake://" + node
		}
		id, _ := json.Marshal(res.ProviderID)
		res.Outputs = map[string]json.RawMessage{tfrunner.OutputProviderID: id}
	}
	r.result, r.hasReq = res, false
}

func (e *Executor) endWith(r *run, re *tfrunner.RunError) {
	r.result = &tfrunner.Result{Operation: r.req.Operation, Error: &tfrunner.RunError{Class: re.Class, Message: re.Message, RetryAfter: re.RetryAfter},
		Started: r.started, Finished: e.clock.Now()}
	r.hasReq = false
}

func (e *Executor) log(c Call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, c)
}

func (e *Executor) injected(m Method, name string, op tfrunner.Operation) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.injectedLocked(m, name, op)
}

func (e *Executor) injectedLocked(m Method, name string, op tfrunner.Operation) error {
	for _, f := range e.failures {
		if f.method != m || f.times == 0 || (f.match != name && (op == "" || f.match != string(op))) {
			continue
		}
		if f.times > 0 {
			f.times--
		}
		return f.err
	}
	return nil
}
