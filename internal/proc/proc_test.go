// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAlive(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	cmd := exec.Command("sh", "-c", "sleep 30; :", "sh", marker) // "; :" keeps sh from exec-ing sleep
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	pidFile := filepath.Join(t.TempDir(), "pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, ok := ReadPIDFile(pidFile); !ok || got != pid {
		t.Fatalf("ReadPIDFile = %d, %v", got, ok)
	}
	// The new process shows its own command line once exec has completed.
	for deadline := time.Now().Add(5 * time.Second); !Alive(pid, marker) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !Alive(pid, "") || !Alive(pid, marker) {
		t.Fatal("a running process with the marker argument is not alive")
	}
	if Alive(pid, marker+"-other") {
		t.Error("a process without the argument was taken for ours")
	}
	_ = cmd.Process.Kill()
	// Until it is reaped the process is a zombie: exited, so not alive.
	deadline := time.Now().Add(5 * time.Second)
	for Alive(pid, "") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if Alive(pid, "") {
		t.Error("a killed (zombie) process counts as alive")
	}
	_ = cmd.Wait()
	if Alive(pid, "") {
		t.Error("a reaped process counts as alive")
	}
	if _, ok := ReadPIDFile(filepath.Join(t.TempDir(), "missing")); ok {
		t.Error("a missing pid file was read")
	}
}

func TestSessionAlive(t *testing.T) {
	// A session leader that leaves a child behind: the session lives while the child does.
	cmd := exec.Command("setsid", "sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!; exit 0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(string(out[:len(out)-1]))
	if err != nil {
		t.Fatalf("child pid %q: %v", out, err)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	var sid int
	var comm, state string
	var pid, ppid, pgrp int
	if _, err := fmt.Sscanf(string(stat), "%d %s %s %d %d %d", &pid, &comm, &state, &ppid, &pgrp, &sid); err != nil {
		t.Fatal(err)
	}
	if !SessionAlive(sid) {
		t.Fatalf("session %d of child %d is not seen alive", sid, child)
	}
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for SessionAlive(sid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if SessionAlive(sid) {
		t.Fatalf("session %d still alive after its last process was killed", sid)
	}
}

// Beside finds an executable file of that name in the binary's folder, and nothing else.
func TestBeside(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "fulfiller-dev")
	for _, tc := range []struct {
		name string
		make func(path string) error // nil: nothing there
		want bool
	}{
		{name: "nothing there"},
		{name: "not executable", make: func(p string) error { return os.WriteFile(p, nil, 0o644) }},
		{name: "a folder", make: func(p string) error { return os.Mkdir(p, 0o755) }},
		{name: "executable", make: func(p string) error { return os.WriteFile(p, nil, 0o755) }, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := filepath.Join(dir, "x-"+strings.ReplaceAll(tc.name, " ", "-"))
			if tc.make != nil {
				if err := tc.make(want); err != nil {
					t.Fatal(err)
				}
			}
			if got, ok := Beside(exe, filepath.Base(want)); got != want || ok != tc.want {
				t.Errorf("Beside = %q, %t; want %q, %t", got, ok, want, tc.want)
			}
		})
	}
}

func TestWaitError(t *testing.T) {
	if err := WaitError(nil); !errors.Is(err, ErrExitedZero) {
		t.Errorf("WaitError(nil) = %v, want ErrExitedZero", err)
	}
	err := exec.Command("sh", "-c", "exit 3").Run()
	var exit *exec.ExitError
	if got := WaitError(err); !errors.As(got, &exit) || exit.ExitCode() != 3 {
		t.Errorf("WaitError(%v) = %v, want the exit error of status 3", err, got)
	}
}
