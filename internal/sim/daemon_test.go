// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestStartStop runs a machine as a detached process of this test binary (acting as
// `fulfiller-dev sim`), sees its Node, and powers it off.
func TestStartStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "sim-daemon"
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	cfg := MachineConfig{
		Name:              name,
		UserDataPath:      writeUserData(t, dir, joinSpec(t, name, tok)),
		Capacity:          testCapacity(),
		HeartbeatInterval: time.Second,
		StateDir:          stateDir,
	}
	t.Cleanup(func() { _ = Stop(stateDir, time.Second) })

	if err := Start(cfg, nil); err != nil {
		t.Fatalf("Start: %v", err)
	}
	pid, ok := Running(stateDir)
	if !ok {
		t.Fatalf("no machine running after Start; log:\n%s", readLog(stateDir))
	}
	if err := Start(cfg, nil); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if again, _ := Running(stateDir); again != pid {
		t.Errorf("second Start started pid %d next to %d", again, pid)
	}
	node := waitForNode(ctx, t, name, nodeReady)
	if node.Spec.ProviderID != "sim://"+name {
		t.Errorf("providerID = %q", node.Spec.ProviderID)
	}

	stopAndWait(ctx, t, stateDir, pid)
	if _, err := os.Stat(filepath.Join(stateDir, PIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file after Stop: %v", err)
	}
	if err := Stop(stateDir, time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := admin(t).CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("the Node should stay after power-off: %v", err)
	}
	log := readLog(stateDir)
	t.Logf("machine log:\n%s", log)
	if !strings.Contains(log, "powered off") {
		t.Errorf("the machine did not shut down on SIGTERM; log:\n%s", log)
	}
	if strings.Contains(log, tok.Secret) {
		t.Errorf("the log shows the token secret:\n%s", log)
	}
}

// TestStartInPlace starts machines as modules/sim does: `sim start --in-place` in the
// background of a shell that reads its stdout until the machine points it at its log. The
// shell returns while the machine runs, with the pid it reported, in a session of its own; a
// second start reports that machine; a start that cannot be says why, and no machine runs.
func TestStartInPlace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "sim-in-place"
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	dir := t.TempDir()
	userData := writeUserData(t, dir, joinSpec(t, name, tok))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func(stateDir string, flags ...string) string {
		t.Helper()
		script := `out=$("$0" sim start --in-place "$@" </dev/null 2>&1 &); printf '%s' "$out"`
		args := append([]string{"-c", script, exe, "--state-dir", stateDir, "--name", name, "--user-data", userData, "--heartbeat-interval", "1s"}, flags...)
		out, err := exec.CommandContext(ctx, "/bin/sh", args...).Output()
		if err != nil {
			t.Fatalf("the shell that started the machine: %v", err)
		}
		return string(out)
	}
	stateDir := filepath.Join(dir, "state")
	t.Cleanup(func() { _ = Stop(stateDir, time.Second) })

	out := start(stateDir)
	var pid int
	if _, err := fmt.Sscanf(out, "machine "+name+" running (pid %d)", &pid); err != nil {
		t.Fatalf("start said %q, not that the machine runs", out)
	}
	if running, ok := Running(stateDir); !ok || running != pid {
		t.Fatalf("Running = %d, %v; the start reported pid %d; log:\n%s", running, ok, pid, readLog(stateDir))
	}
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Errorf("the machine's session is %d (%v), want its own (%d)", sid, err, pid)
	}
	if again := start(stateDir); again != out {
		t.Errorf("second start said %q, want %q", again, out)
	}
	waitForNode(ctx, t, name, nodeReady)

	stopAndWait(ctx, t, stateDir, pid)
	if log := readLog(stateDir); !strings.Contains(log, "powered off") || strings.Contains(log, tok.Secret) {
		t.Errorf("the log should say the machine powered off, without the token secret:\n%s", log)
	}

	broken := filepath.Join(dir, "broken")
	if out := start(broken, "--cpu", "lots"); !strings.Contains(out, `cpu capacity "lots"`) {
		t.Errorf("a start with a bad capacity said %q", out)
	}
	if _, ok := Running(broken); ok {
		t.Error("a machine runs after a start that failed")
	}
}

// TestStopWithoutMachine: stopping what never ran, or a state dir that is gone, is a no-op.
func TestStopWithoutMachine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := Stop(filepath.Join(dir, "absent"), time.Second); err != nil {
		t.Errorf("Stop of a missing state dir: %v", err)
	}
	// A stale pid file naming a process that is not this machine is not obeyed.
	if err := os.WriteFile(filepath.Join(dir, PIDFile), []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := Running(dir); ok {
		t.Error("Running believes pid 1 is the machine")
	}
	if err := Stop(dir, time.Second); err != nil {
		t.Errorf("Stop with a stale pid file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, PIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale pid file not removed: %v", err)
	}
}

func TestMainUsage(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	if code := mainTo(nil, &out, &errOut); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	if code := mainTo([]string{"start", "--name", "x"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "missing --state-dir, --user-data") {
		t.Errorf("start without flags: exit %d, stderr %q", code, errOut.String())
	}
	if code := mainTo([]string{"frobnicate"}, &out, &errOut); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
}

// stopAndWait powers off the machine of stateDir and waits until its process pid is gone.
func stopAndWait(ctx context.Context, t *testing.T, stateDir string, pid int) {
	t.Helper()
	if err := Stop(stateDir, 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), nil
	}); err != nil {
		t.Errorf("process %d still exists after Stop", pid)
	}
}

func readLog(stateDir string) string {
	data, _ := os.ReadFile(filepath.Join(stateDir, LogFile))
	return string(data)
}
