// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulfiller-sh/fulfiller/internal/proc"
)

// Files in a machine's state dir.
const (
	ConfigFile = "machine.json"
	LogFile    = "machine.log"
	PIDFile    = "pid"
	lockFile   = "lock"
)

// Start powers a machine on as a detached background process, so that a short-lived caller
// (tofu's local-exec) can leave it running: it writes cfg to <StateDir>/machine.json and runs
// `binary... run --config <StateDir>/machine.json` in its own session, output appended to
// <StateDir>/machine.log and its pid in <StateDir>/pid. binary is the `fulfiller-dev sim` command
// line; empty means CommandBeside this executable. Start returns as soon as the process
// runs, and does nothing when a machine with this state dir is running already.
func Start(cfg MachineConfig, binary []string) error {
	cfg, err := prepare(cfg)
	if err != nil {
		return err
	}
	stateDir := cfg.StateDir
	if len(binary) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("starting machine: finding this executable: %w", err)
		}
		binary = CommandBeside(exe)
	}
	unlock, err := lockStateDir(stateDir)
	if err != nil {
		return fmt.Errorf("starting machine: %w", err)
	}
	defer unlock()
	if _, ok := runningPID(stateDir); ok {
		return nil
	}
	configPath, logf, err := writeConfig(cfg)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(binary[0], append(binary[1:], "run", "--config", configPath)...)
	cmd.Dir = stateDir
	cmd.Stdout, cmd.Stderr = logf, logf // stdin is /dev/null; no other descriptor is inherited
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting machine: %w", err)
	}
	// Reap the process if this caller outlives it; a short-lived caller leaves it to init.
	go func() { _ = cmd.Wait() }()
	if err := writeFileAtomic(filepath.Join(stateDir, PIDFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n")); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return fmt.Errorf("starting machine: writing pid file: %w", err)
	}
	return nil
}

// StartHere powers a machine on in this process instead of starting another: tofu's
// local-exec runs it in the background and reads report until it closes, so that a machine
// costs one process start, not two (a start costs CPU in proportion to the pages it
// touches, and a burst starts a hundred: docs/benchmarks.md, "What a process start costs"). It does what Start does, with this process as the
// machine: it writes the config, takes a session of its own (the caller's process group may
// be killed without it) and writes its pid. It then writes the line that says the machine
// runs to report, points stdout and stderr at the machine's log, which closes report when
// report is stdout, and runs the machine until SIGTERM or SIGINT. When a machine runs with
// this state dir already, it reports that one and returns.
func StartHere(cfg MachineConfig, report io.Writer) error {
	cfg, err := prepare(cfg)
	if err != nil {
		return err
	}
	unlock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return fmt.Errorf("starting machine: %w", err)
	}
	if pid, ok := runningPID(cfg.StateDir); ok {
		unlock()
		reportRunning(report, cfg, pid)
		return nil
	}
	logf, err := becomeMachine(cfg)
	unlock()
	if err != nil {
		return err
	}
	defer logf.Close()
	reportRunning(report, cfg, os.Getpid())
	// From here on the machine writes to its log, and a caller reading report from our
	// stdout sees it close.
	for _, fd := range []int{1, 2} {
		if err := unix.Dup2(int(logf.Fd()), fd); err != nil {
			return fmt.Errorf("starting machine: output to its log: %w", err)
		}
	}
	runUntilStopped(cfg, os.Stdout)
	return nil
}

// becomeMachine makes this process the machine of cfg.StateDir (its config, a session of its
// own, the state dir as working folder, the pid file) and returns the machine's log.
func becomeMachine(cfg MachineConfig) (*os.File, error) {
	_, logf, err := writeConfig(cfg)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		logf.Close()
		return nil, fmt.Errorf("starting machine: %w", err)
	}
	if _, err := syscall.Setsid(); err != nil {
		return fail(fmt.Errorf("a session of its own: %w", err))
	}
	// The working folder is what tells this machine's process from another that reuses its pid.
	if err := os.Chdir(cfg.StateDir); err != nil {
		return fail(err)
	}
	if err := writeFileAtomic(filepath.Join(cfg.StateDir, PIDFile), []byte(strconv.Itoa(os.Getpid())+"\n")); err != nil {
		return fail(fmt.Errorf("writing pid file: %w", err))
	}
	return logf, nil
}

// reportRunning writes the line that says a machine runs; modules/sim's power-on provisioner
// reads it from `sim start --in-place` ("machine <name> running ...").
func reportRunning(w io.Writer, cfg MachineConfig, pid int) {
	fmt.Fprintf(w, "machine %s running (pid %d), log: %s\n", cfg.Name, pid, filepath.Join(cfg.StateDir, LogFile))
}

// prepare checks cfg, completes it and makes its state dir absolute and present.
func prepare(cfg MachineConfig) (MachineConfig, error) {
	if cfg.StateDir == "" {
		return cfg, errors.New("starting machine: state dir is empty")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return cfg, fmt.Errorf("starting machine: %w", err)
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return cfg, fmt.Errorf("starting machine: %w", err)
	}
	cfg.StateDir = stateDir
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return cfg, fmt.Errorf("starting machine: creating state dir: %w", err)
	}
	return cfg, nil
}

// writeConfig writes cfg to the state dir and opens the machine's log for appending.
func writeConfig(cfg MachineConfig) (string, *os.File, error) {
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", nil, fmt.Errorf("starting machine: encoding config: %w", err)
	}
	configPath := filepath.Join(cfg.StateDir, ConfigFile)
	if err := writeFileAtomic(configPath, data); err != nil {
		return "", nil, fmt.Errorf("starting machine: writing config: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(cfg.StateDir, LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("starting machine: opening log: %w", err)
	}
	return configPath, logf, nil
}

// Stop powers off the machine running with stateDir: SIGTERM to its process group, SIGKILL
// after grace. It removes the pid file and does nothing when no machine runs.
func Stop(stateDir string, grace time.Duration) error {
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return fmt.Errorf("stopping machine: %w", err)
	}
	if _, err := os.Stat(stateDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := lockStateDir(stateDir)
	if err != nil {
		return fmt.Errorf("stopping machine: %w", err)
	}
	defer unlock()
	removePID := func() error {
		if err := os.Remove(filepath.Join(stateDir, PIDFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stopping machine: %w", err)
		}
		return nil
	}
	pid, ok := runningPID(stateDir)
	if !ok {
		return removePID()
	}
	gone := func() bool { _, ok := runningPID(stateDir); return !ok }
	// Setsid made the machine a process group leader: signal everything it started.
	signal := func(sig syscall.Signal) {
		if err := syscall.Kill(-pid, sig); errors.Is(err, syscall.ESRCH) {
			_ = syscall.Kill(pid, sig)
		}
	}
	signal(syscall.SIGTERM)
	if !waitUntil(gone, grace) {
		signal(syscall.SIGKILL)
		if !waitUntil(gone, 10*time.Second) {
			return fmt.Errorf("stopping machine: process %d survives SIGKILL", pid)
		}
	}
	return removePID()
}

// Running reports the pid of the machine running with stateDir, if any.
func Running(stateDir string) (int, bool) {
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return 0, false
	}
	return runningPID(stateDir)
}

// runningPID reads the pid file and checks the process is alive (not a zombie) and is the
// machine of this state dir, not an unrelated process that reused the pid.
func runningPID(stateDir string) (int, bool) {
	pid, ok := proc.ReadPIDFile(filepath.Join(stateDir, PIDFile))
	if !ok || !proc.Alive(pid, "") {
		return 0, false
	}
	// A machine runs in its state dir, whether Start started it or it started itself.
	cwd, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return 0, false
	}
	dir, err := os.Stat(stateDir)
	if err != nil || !os.SameFile(cwd, dir) {
		return 0, false
	}
	return pid, true
}

// lockStateDir serialises Start and Stop on one state dir.
func lockStateDir(stateDir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(stateDir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking state dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking state dir: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(cond func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Binary is the simulated machine alone (cmd/fulfiller-sim): it starts in about half the CPU
// of the development binary, which links the controller.
const Binary = "fulfiller-sim"

// CommandBeside is the `sim` command of the binary exe: Binary when it lies beside exe (an
// executable file), else `exe sim`. modules/sim chooses the same way.
func CommandBeside(exe string) []string {
	if bin, ok := proc.Beside(exe, Binary); ok {
		return []string{bin}
	}
	return []string{exe, "sim"}
}
