// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package executor starts the runners of tofu runs somewhere (a local process, a Kubernetes
// Job) and reports on them, behind one interface; it admits runs through a Limiter of the
// budgets they draw on.
package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// RunPhase is where a run is, derived from its files and process for display and decisions.
type RunPhase string

const (
	RunPending RunPhase = "Pending"
	RunRunning RunPhase = "Running"
	// RunStopping: the run was cancelled and its runner has not ended yet (tofu is releasing
	// its lock).
	RunStopping  RunPhase = "Stopping"
	RunSucceeded RunPhase = "Succeeded"
	RunFailed    RunPhase = "Failed"
)

// RunStatus is what an executor knows about one run.
type RunStatus struct {
	Name  string
	Phase RunPhase
	// Result is set once the run has finished (Succeeded or Failed).
	Result    *tfrunner.Result
	LogPath   string
	StartTime time.Time
	// Progress is the latest message tofu reported while the run goes on (e.g.
	// "terraform_data.machine: Creating..."), for status displays.
	Progress string
	// EndReported: the executor will report this running run's end as it happens
	// (Local.OnEnd), so a caller looks again for its progress only, not to notice
	// its end.
	EndReported bool
}

// Done reports whether the run has finished (Succeeded or Failed): its runner has ended.
func (s RunStatus) Done() bool {
	return s.Phase == RunSucceeded || s.Phase == RunFailed
}

// Executor starts runs somewhere (a child process, a Kubernetes Job) and reports on them. Runs
// outlive the process that started them; any Executor on the same store sees them.
//
// A run belongs to the claim whose UID its request carries in Labels[LabelNodeClaimUID]. A
// run of the same name that belongs to another claim (an earlier claim of the same name,
// deleted and made again) is not this claim's run: Start, Status and Cancel return
// ErrOtherClaimsRun for it. An empty claimUID matches any run.
type Executor interface {
	// Start starts the run req.Name. It is idempotent: when a run of that name exists for the
	// same claim, it does nothing and returns nil.
	Start(ctx context.Context, req tfrunner.Request) error
	// Status reports on a run; ErrRunNotFound when there is none of that name. Once a run
	// has finished, the stored request (the claim's user data and credentials) is removed;
	// its log stays readable.
	Status(ctx context.Context, name, claimUID string) (RunStatus, error)
	// Cancel starts stopping a run and returns without waiting: the runner is interrupted
	// (so tofu releases its lock) and killed when it has not stopped after a grace period.
	// Until the runner has ended, Status reports RunStopping. Cancelling a finished run does
	// nothing.
	Cancel(ctx context.Context, name, claimUID string) error
}

var (
	// ErrRunNotFound: no run of that name.
	ErrRunNotFound = errors.New("run not found")
	// ErrBusy: the executor runs as many runs as it may; start this one later.
	ErrBusy = errors.New("too many runs in progress")
	// ErrOtherClaimsRun: a run of that name exists, but for another claim (UID).
	ErrOtherClaimsRun = errors.New("the run belongs to another claim")
)

// CheckOwner returns ErrOtherClaimsRun when a run labelled with labels belongs to a claim
// other than claimUID. A run without the label (made before runs were labelled) and an empty
// claimUID match.
func CheckOwner(name string, labels map[string]string, claimUID string) error {
	theirs := labels[keys.LabelNodeClaimUID]
	if claimUID == "" || theirs == "" || theirs == claimUID {
		return nil
	}
	return fmt.Errorf("run %s: %w (claim uid %s, not %s)", name, ErrOtherClaimsRun, theirs, claimUID)
}

// LogTailer is an Executor that reads back the end of a run's log while its runner's record
// lasts (a local run's folder; a runner Job until its TTL), so that the run's record can keep
// why it failed after the runner is gone.
type LogTailer interface {
	// LogTail returns the last lines of the run's log (at most tfrunner.LogTailLines lines
	// and tfrunner.LogTailBytes bytes), as the runner wrote them: redacted, tofu's `-json`
	// messages. ErrRunNotFound when the run, or its log, is gone.
	LogTail(ctx context.Context, name, claimUID string) ([]byte, error)
}
