package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
