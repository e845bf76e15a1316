package tfrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/proc"
)

// RunPhase is where a run is, derived from its files and process for display and decisions.
type RunPhase string

const (
	RunPending   RunPhase = "Pending"
	RunRunning   RunPhase = "Running"
	RunSucceeded RunPhase = "Succeeded"
	RunFailed    RunPhase = "Failed"
)

// RunStatus is what an executor knows about one run.
type RunStatus struct {
	Name  string
	Phase RunPhase
	// Result is set once the run has finished (Succeeded or Failed).
	Result    *Result
	LogPath   string
	StartTime time.Time
	// Progress is the latest message tofu reported while the run goes on (e.g.
	// "terraform_data.machine: Creating..."), for status displays.
	Progress string
}

// Executor starts runs somewhere (a child process, a Kubernetes Job) and reports on them. Runs
// outlive the process that started them; any Executor on the same store sees them.
type Executor interface {
	// Start starts the run req.Name. It is idempotent: when a run of that name exists, it
	// does nothing and returns nil.
	Start(ctx context.Context, req Request) error
	// Status reports on a run; ErrRunNotFound when there is none of that name.
	Status(ctx context.Context, name string) (RunStatus, error)
	// Cancel interrupts a run (SIGINT, so tofu releases its lock), and kills it when it has
	// not stopped after a grace period. Cancelling a finished run does nothing.
	Cancel(ctx context.Context, name string) error
}

var (
	// ErrRunNotFound: no run of that name.
	ErrRunNotFound = errors.New("run not found")
	// ErrBusy: the executor runs as many runs as it may; start this one later.
	ErrBusy = errors.New("too many runs in progress")
)

// Files in a local run's folder, which is also the run's Request.WorkDir.
const (
	RequestFileName = "request.json"
	ResultFileName  = "result.json"
	LogFileName     = "run.log"
	PIDFileName     = "pid"
)

// DefaultMaxConcurrent bounds local runs when LocalExecutor.MaxConcurrent is 0.
const DefaultMaxConcurrent = 4

// startWindow is how long a run folder without a pid file counts as being started (by
// another executor instance) before it is reported as failed.
const startWindow = 30 * time.Second

// LocalExecutor runs each run as a child process, `<Command...> --request <dir>/request.json`,
// in its own session, with stdout and stderr going to <dir>/run.log, where <dir> is
// Dir/<name>. The child writes <dir>/result.json before it exits. Children are not killed
// when the executor's process exits: a new LocalExecutor on the same Dir finds them through
// <dir>/pid and /proc (Linux only).
//
// At most MaxConcurrent runs go on at once, counted over Dir (so adopted runs count); Start
// returns ErrBusy beyond that and the caller retries later.
type LocalExecutor struct {
	// Dir holds one folder per run.
	Dir string
	// Command is the runner and its leading arguments (default: this executable and "run").
	Command []string
	// Env is added to this process's environment for the runner.
	Env []string
	// Grace is how long Cancel waits after SIGINT before it kills the runner (default
	// TofuInterruptGrace + 30s, so tofu's own grace ends first).
	Grace time.Duration
	// MaxConcurrent bounds runs in progress (default DefaultMaxConcurrent).
	MaxConcurrent int

	mu sync.Mutex // serialises Start
}

var _ Executor = (*LocalExecutor)(nil)

// runDir is absolute: the runner's command line holds it, and adopters compare it.
func (e *LocalExecutor) runDir(name string) string {
	dir, err := filepath.Abs(e.Dir)
	if err != nil {
		dir = e.Dir
	}
	return filepath.Join(dir, name)
}

func (e *LocalExecutor) command() ([]string, error) {
	if len(e.Command) > 0 {
		return e.Command, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the runner binary: %w", err)
	}
	return []string{exe, "run"}, nil
}

// Start implements Executor. Request.WorkDir is replaced by the run's folder.
func (e *LocalExecutor) Start(ctx context.Context, req Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := e.runDir(req.Name)
	req.WorkDir = dir
	if err := req.Validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	limit := e.MaxConcurrent
	if limit <= 0 {
		limit = DefaultMaxConcurrent
	}
	if n, err := e.inProgress(); err != nil {
		return err
	} else if n >= limit {
		return fmt.Errorf("starting run %s: %w (%d of %d)", req.Name, ErrBusy, n, limit)
	}
	if err := os.MkdirAll(e.Dir, 0o700); err != nil {
		return fmt.Errorf("creating runs folder: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return fmt.Errorf("creating run folder: %w", err)
	}
	if err := e.spawn(dir, req); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("starting run %s: %w", req.Name, err)
	}
	return nil
}

func (e *LocalExecutor) spawn(dir string, req Request) error {
	command, err := e.command()
	if err != nil {
		return err
	}
	reqPath := filepath.Join(dir, RequestFileName)
	if err := WriteRequest(reqPath, req); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, LogFileName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating run log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	args := append(append([]string{}, command[1:]...), "--request", reqPath)
	cmd := exec.Command(command[0], args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), e.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // survives us; no terminal signals
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	if err := writeFileAtomic(filepath.Join(dir, PIDFileName), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	go func() { _ = cmd.Wait() }() // reap; adopters poll /proc instead
	return nil
}

// inProgress counts runs in Dir whose runner is alive.
func (e *LocalExecutor) inProgress() (int, error) {
	entries, err := os.ReadDir(e.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing runs: %w", err)
	}
	n := 0
	for _, entry := range entries {
		if !entry.IsDir() {
			continue
		}
		dir := filepath.Join(e.Dir, entry.Name())
		if pid, _, ok := readPID(dir); ok && runnerAlive(pid, dir) {
			n++
		}
	}
	return n, nil
}

// Status implements Executor.
func (e *LocalExecutor) Status(ctx context.Context, name string) (RunStatus, error) {
	if validateName(name) != nil {
		return RunStatus{}, fmt.Errorf("run %q: %w", name, ErrRunNotFound)
	}
	dir := e.runDir(name)
	info, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return RunStatus{}, fmt.Errorf("run %s: %w", name, ErrRunNotFound)
	}
	if err != nil {
		return RunStatus{}, fmt.Errorf("reading run %s: %w", name, err)
	}
	st := RunStatus{Name: name, Phase: RunPending, LogPath: filepath.Join(dir, LogFileName), StartTime: info.ModTime()}
	pid, started, hasPID := readPID(dir)
	if hasPID {
		st.StartTime = started
	}
	if done, err := finished(dir, &st); done || err != nil {
		return st, err
	}
	switch {
	case hasPID && runnerAlive(pid, dir):
		st.Phase = RunRunning
		st.Progress = lastProgress(st.LogPath)
		return st, nil
	case !hasPID && time.Since(info.ModTime()) < startWindow:
		return st, nil
	}
	// The runner is gone; it may have written its result just now.
	if done, err := finished(dir, &st); done || err != nil {
		return st, err
	}
	msg := "runner exited without a result"
	if !hasPID {
		msg = "runner was not started"
	}
	res := &Result{Error: &RunError{Class: Unknown, Message: msg}, Started: st.StartTime}
	if req, err := ReadRequest(filepath.Join(dir, RequestFileName)); err == nil {
		res.Operation = req.Operation
	}
	if info, err := os.Stat(st.LogPath); err == nil {
		res.Finished = info.ModTime().UTC()
	}
	st.Phase, st.Result = RunFailed, res
	return st, nil
}

// finished fills st from the run's result file, when there is one.
func finished(dir string, st *RunStatus) (bool, error) {
	res, err := ReadResult(filepath.Join(dir, ResultFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading result of run %s: %w", st.Name, err)
	}
	st.Result, st.Phase = &res, RunFailed
	if res.Succeeded {
		st.Phase = RunSucceeded
	}
	return true, nil
}

// Cancel implements Executor. It blocks until the runner has exited: up to Grace after
// SIGINT, then it kills the runner's session. When ctx ends first it returns ctx's error and
// the run goes on stopping by itself.
func (e *LocalExecutor) Cancel(ctx context.Context, name string) error {
	if validateName(name) != nil {
		return fmt.Errorf("run %q: %w", name, ErrRunNotFound)
	}
	dir := e.runDir(name)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("run %s: %w", name, ErrRunNotFound)
	}
	pid, _, ok := readPID(dir)
	if !ok || !runnerAlive(pid, dir) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("interrupting run %s: %w", name, err)
	}
	grace := e.Grace
	if grace <= 0 {
		grace = TofuInterruptGrace + 30*time.Second
	}
	if err := waitExit(ctx, pid, dir, grace); err == nil || ctx.Err() != nil {
		return err
	}
	// Still running after the grace period: kill the whole session (the runner is its
	// leader; tofu dies with its parent).
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing run %s: %w", name, err)
	}
	if err := waitExit(ctx, pid, dir, 10*time.Second); err != nil {
		return fmt.Errorf("killing run %s: %w", name, err)
	}
	return nil
}

var errStillRunning = errors.New("runner still running")

// waitExit polls until the runner is gone, ctx ends or d passes.
func waitExit(ctx context.Context, pid int, dir string, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for runnerAlive(pid, dir) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return errStillRunning
		case <-tick.C:
		}
	}
	return nil
}

// readPID reads a run's pid file and when it was written.
func readPID(dir string) (int, time.Time, bool) {
	path := filepath.Join(dir, PIDFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, time.Time{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, time.Time{}, false
	}
	info, err := os.Stat(path)
	if err != nil {
		return 0, time.Time{}, false
	}
	return pid, info.ModTime().UTC(), true
}

// runnerAlive reports whether pid is a live process running the request of the run in dir
// (so a reused pid is not mistaken for the runner).
func runnerAlive(pid int, dir string) bool {
	return proc.Alive(pid, filepath.Join(dir, RequestFileName))
}

// lastProgress returns the @message of the last tofu UI line in the tail of a run log.
func lastProgress(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tailSize = 8 << 10
	if info, err := f.Stat(); err == nil && info.Size() > tailSize {
		if _, err := f.Seek(-tailSize, io.SeekEnd); err != nil {
			return ""
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := bytes.Split(data, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var msg struct {
			Message string `json:"@message"`
			Module  string `json:"@module"`
		}
		if json.Unmarshal(lines[i], &msg) == nil && msg.Module == "tofu.ui" && msg.Message != "" {
			return oneLine(msg.Message, maxMessageLen)
		}
	}
	return ""
}
