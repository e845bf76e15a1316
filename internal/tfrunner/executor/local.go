// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

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

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/proc"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Files in a local run's folder, which is also the run's Request.WorkDir. The request holds
// the claim's user data and credentials: the runner removes it once it has read it.
const (
	LogFileName = "run.log"
	PIDFileName = "pid"
	// RunInfoFileName holds what the executor keeps of the request: operation and labels.
	RunInfoFileName = "run.json"
	// cancelFileName marks a cancelled run; its time starts the grace period.
	cancelFileName = "cancelled"
)

// runInfo is the part of a request that stays with a local run: nothing secret.
type runInfo struct {
	Operation tfrunner.Operation `json:"operation"`
	Labels    map[string]string  `json:"labels,omitempty"`
}

// LocalRunNice is the niceness of local runs in the controller: a burst of runs on the
// controller's own CPUs does not slow the controller's (and Karpenter's) work, such as
// answering Create, nor a control plane on the same machine.
const LocalRunNice = 10

// ReniceGroup sets the niceness of the process group that pid leads: a runner started as
// the leader of its own group, and any child it started already. A group that has ended is
// no error.
func ReniceGroup(pid, nice int) error {
	if err := syscall.Setpriority(syscall.PRIO_PGRP, pid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// startWindow is how long a run folder without a pid file counts as being started (by
// another executor instance) before it is reported as failed.
const startWindow = 30 * time.Second

// Local runs each run as a child process, `<Command...> --request <dir>/request.json`,
// in its own session, with stdout and stderr going to <dir>/run.log, where <dir> is
// Dir/<name>. The child writes <dir>/result.json before it exits. Children are not killed
// when the executor's process exits: a new Local on the same Dir finds them through
// <dir>/pid and /proc (Linux only).
//
// Runs start through Limiter, which counts the runs in progress over Dir (so adopted runs
// count); Start returns an *AdmissionError (ErrBusy) when it refuses one, and the caller
// retries later.
type Local struct {
	// Dir holds one folder per run.
	Dir string
	// Command is the runner and its leading arguments. By default it is RunnerBinary when that
	// lies next to this executable, else this executable and "run"; either way the runner
	// gets this executable as FULFILLER_BINARY, for provisioners that run its commands.
	Command []string
	// Env is added to this process's environment for the runner.
	Env []string
	// Grace is how long Cancel waits after SIGINT before it kills the runner (default
	// TofuInterruptGrace + 30s, so tofu's own grace ends first).
	Grace time.Duration
	// Limiter admits new runs (default: its own, DefaultMaxConcurrent at once).
	Limiter *Limiter
	// CacheDir is the module cache the runs share (Request.CacheDir; default
	// Dir/.module-cache, which no run name can take).
	CacheDir string
	// Nice is the runs' niceness (0-19), which tofu, its providers and provisioners inherit:
	// with a positive one, the controller and the rest of the machine's work (a local
	// control plane) come before the runs when the CPUs are busy. The local environment and
	// the controller's local executor use LocalRunNice.
	Nice int
	// OnEnd, when set, is called with a run's name and labels when a runner this executor
	// started ends (not for runs it adopted: those are seen by Status only).
	OnEnd func(name string, labels map[string]string)

	ownLimiter Limiter
	// reaping holds the names of the runs whose runner this executor waits for (and so
	// reports the end of), until it has ended.
	reaping sync.Map
}

var _ Executor = (*Local)(nil)

// runDir is absolute: the runner's command line holds it, and adopters compare it.
func (e *Local) runDir(name string) string {
	dir, err := filepath.Abs(e.Dir)
	if err != nil {
		dir = e.Dir
	}
	return filepath.Join(dir, name)
}

func (e *Local) cacheDir() string {
	if e.CacheDir != "" {
		return e.CacheDir
	}
	return e.runDir(".module-cache")
}

// RunnerBinary is the runner alone (cmd/fulfiller-runner): it starts in a tenth of the CPU
// of a binary that links the controller.
const RunnerBinary = "fulfiller-runner"

// command is the runner's command and the environment it adds for it.
func (e *Local) command() ([]string, []string, error) {
	if len(e.Command) > 0 {
		return e.Command, nil, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("finding the runner binary: %w", err)
	}
	command, env := RunnerBeside(exe)
	return command, env, nil
}

// RunnerBeside is the runner for the binary exe: RunnerBinary when it lies beside exe, else
// `exe run`; the runner gets exe as FULFILLER_BINARY either way.
func RunnerBeside(exe string) ([]string, []string) {
	env := []string{tfrunner.BinaryEnv + "=" + exe}
	if runner, ok := proc.Beside(exe, RunnerBinary); ok {
		return []string{runner}, env
	}
	return []string{exe, "run"}, env
}

// Start implements Executor. Request.WorkDir is replaced by the run's folder, and, for a
// request with Shortcuts, Request.CacheDir by the executor's module cache.
func (e *Local) Start(ctx context.Context, req tfrunner.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := e.runDir(req.Name)
	req.WorkDir, req.CacheDir = dir, ""
	if req.Shortcuts {
		req.CacheDir = e.cacheDir()
	}
	if err := req.Validate(); err != nil {
		return err
	}
	return e.limiter().Start(ctx, req, StartSteps{
		Exists: func(context.Context) (bool, error) {
			if _, err := os.Stat(dir); err != nil {
				return false, nil
			}
			return true, CheckOwner(req.Name, readRunInfo(dir).Labels, req.Labels[keys.LabelNodeClaimUID])
		},
		InProgress: func(context.Context) (map[string]bool, error) { return e.inProgress() },
		Create:     func(context.Context) error { return e.create(dir, req) },
	})
}

func (e *Local) limiter() *Limiter {
	if e.Limiter != nil {
		return e.Limiter
	}
	return &e.ownLimiter
}

// create makes the run's folder and starts its runner.
func (e *Local) create(dir string, req tfrunner.Request) error {
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

func (e *Local) spawn(dir string, req tfrunner.Request) error {
	command, commandEnv, err := e.command()
	if err != nil {
		return err
	}
	if err := tfrunner.WriteJSON(filepath.Join(dir, RunInfoFileName), runInfo{Operation: req.Operation, Labels: req.Labels}); err != nil {
		return err
	}
	reqPath := filepath.Join(dir, tfrunner.RequestFileName)
	if err := tfrunner.WriteRequest(reqPath, req); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, LogFileName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating run log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	args := append(append([]string{}, command[1:]...), "--request", reqPath, "--remove-request")
	cmd := exec.Command(command[0], args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(append(os.Environ(), commandEnv...), e.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // survives us; no terminal signals
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	if e.Nice != 0 {
		// The runner leads its own process group (Setsid).
		if err := ReniceGroup(pid, e.Nice); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("setting the runner's niceness to %d: %w", e.Nice, err)
		}
	}
	if err := tfrunner.WriteFileAtomic(filepath.Join(dir, PIDFileName), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	e.reaping.Store(req.Name, struct{}{})
	go func() { // reap; adopters poll /proc instead
		_ = cmd.Wait()
		e.reaping.Delete(req.Name)
		if e.OnEnd != nil {
			e.OnEnd(req.Name, req.Labels)
		}
	}()
	return nil
}

// inProgress are the runs in Dir whose runner is alive.
func (e *Local) inProgress() (map[string]bool, error) {
	entries, err := os.ReadDir(e.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	names := map[string]bool{}
	for _, entry := range entries {
		if !entry.IsDir() {
			continue
		}
		dir := filepath.Join(e.Dir, entry.Name())
		if pid, _, ok := readPID(dir); ok && runnerAlive(pid, dir) {
			names[entry.Name()] = true
		}
	}
	return names, nil
}

// Status implements Executor.
func (e *Local) Status(ctx context.Context, name, claimUID string) (RunStatus, error) {
	if tfrunner.ValidateName(name) != nil {
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
	run := readRunInfo(dir)
	if err := CheckOwner(name, run.Labels, claimUID); err != nil {
		return RunStatus{}, err
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
		if cancelled, ok := cancelTime(dir); ok {
			st.Phase = RunStopping
			if time.Since(cancelled) > e.grace() {
				// Still running after the grace period: kill the whole session (the runner
				// is its leader; tofu dies with its parent).
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
			return st, nil
		}
		st.Progress = lastProgress(st.LogPath)
		_, reaping := e.reaping.Load(name)
		st.EndReported = reaping && e.OnEnd != nil
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
	res := &tfrunner.Result{Operation: run.Operation, Error: &tfrunner.RunError{Class: tfrunner.Unknown, Message: msg}, Started: st.StartTime}
	if _, cancelled := cancelTime(dir); cancelled {
		res.Error = tfrunner.NewRunError(tfrunner.Cancelled, "run cancelled; the runner was killed after its grace period")
	}
	if info, err := os.Stat(st.LogPath); err == nil {
		res.Finished = info.ModTime().UTC()
	}
	removeRequest(dir)
	st.Phase, st.Result = RunFailed, res
	return st, nil
}

// readRunInfo reads what a run keeps of its request; for a run made before run.json
// existed, from its request while that is still there.
func readRunInfo(dir string) runInfo {
	var info runInfo
	if err := tfrunner.ReadJSON(filepath.Join(dir, RunInfoFileName), &info); err == nil {
		return info
	}
	if req, err := tfrunner.ReadRequest(filepath.Join(dir, tfrunner.RequestFileName)); err == nil {
		info = runInfo{Operation: req.Operation, Labels: req.Labels}
	}
	return info
}

// removeRequest removes a finished run's request, which a runner that died before reading it
// left behind.
func removeRequest(dir string) {
	_ = os.Remove(filepath.Join(dir, tfrunner.RequestFileName))
}

// finished fills st from the run's result file, when there is one.
func finished(dir string, st *RunStatus) (bool, error) {
	res, err := tfrunner.ReadResult(filepath.Join(dir, tfrunner.ResultFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading result of run %s: %w", st.Name, err)
	}
	removeRequest(dir)
	st.Result, st.Phase = &res, RunFailed
	if res.Succeeded {
		st.Phase = RunSucceeded
	}
	return true, nil
}

func (e *Local) grace() time.Duration {
	if e.Grace > 0 {
		return e.Grace
	}
	return tfrunner.TofuInterruptGrace + 30*time.Second
}

// Cancel implements Executor: it interrupts the runner (SIGINT; the runner interrupts tofu)
// once, marks the run cancelled and returns. Status reports the run Stopping while the runner
// lives, and kills the runner's session once Grace has passed since the cancel.
func (e *Local) Cancel(_ context.Context, name, claimUID string) error {
	if tfrunner.ValidateName(name) != nil {
		return fmt.Errorf("run %q: %w", name, ErrRunNotFound)
	}
	dir := e.runDir(name)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("run %s: %w", name, ErrRunNotFound)
	}
	if err := CheckOwner(name, readRunInfo(dir).Labels, claimUID); err != nil {
		return err
	}
	pid, _, ok := readPID(dir)
	if !ok || !runnerAlive(pid, dir) {
		return nil
	}
	marker, err := os.OpenFile(filepath.Join(dir, cancelFileName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil // interrupted already: a second interrupt would make tofu stop without releasing its lock
	}
	if err != nil {
		return fmt.Errorf("cancelling run %s: %w", name, err)
	}
	_ = marker.Close()
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("interrupting run %s: %w", name, err)
	}
	return nil
}

// cancelTime is when the run was cancelled.
func cancelTime(dir string) (time.Time, bool) {
	info, err := os.Stat(filepath.Join(dir, cancelFileName))
	if err != nil {
		return time.Time{}, false
	}
	return info.ModTime(), true
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
	return proc.Alive(pid, filepath.Join(dir, tfrunner.RequestFileName))
}

// lastProgress returns the @message of the last tofu UI line in the tail of a run log.
func lastProgress(logPath string) string {
	data, _, err := readEnd(logPath, 8<<10)
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
			return v1alpha1.ShortMessage(msg.Message)
		}
	}
	return ""
}

// LogTail implements LogTailer: the end of the run's run.log.
func (e *Local) LogTail(_ context.Context, name, claimUID string) ([]byte, error) {
	if tfrunner.ValidateName(name) != nil {
		return nil, fmt.Errorf("run %q: %w", name, ErrRunNotFound)
	}
	dir := e.runDir(name)
	if err := CheckOwner(name, readRunInfo(dir).Labels, claimUID); err != nil {
		return nil, err
	}
	data, cutStart, err := readEnd(filepath.Join(dir, LogFileName), tfrunner.LogTailBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("log of run %s: %w", name, ErrRunNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading log of run %s: %w", name, err)
	}
	return lastLines(data, tfrunner.LogTailLines, cutStart), nil
}

// readEnd reads the last size bytes of the file at path (all of it when it is shorter);
// cutStart says the file is longer, so what was read starts inside a line.
func readEnd(path string, size int64) (data []byte, cutStart bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = f.Close() }()
	if info, err := f.Stat(); err == nil && info.Size() > size {
		if _, err := f.Seek(-size, io.SeekEnd); err != nil {
			return nil, false, err
		}
		cutStart = true
	}
	data, err = io.ReadAll(f)
	return data, cutStart, err
}

// lastLines is the last n lines of data; cutStart says data starts inside a line, which is
// left out.
func lastLines(data []byte, n int, cutStart bool) []byte {
	if cutStart {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		} else {
			return nil
		}
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	start := end
	for count := 0; start > 0; start-- {
		if data[start-1] == '\n' {
			if count++; count == n {
				break
			}
		}
	}
	return data[start:]
}
