// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// testExecutor runs this test binary as the runner (TestMain turns it into Main).
func testExecutor(t *testing.T, dir string) *Local {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := &Local{Dir: dir, Command: []string{exe}, Env: []string{mainEnv + "=1"}, Grace: 20 * time.Second, Limiter: NewLimiter(MaxRuns(1))}
	return e
}

// killRunners kills what a test left running in dir.
func killRunners(t *testing.T, dir string) {
	t.Cleanup(func() {
		entries, _ := os.ReadDir(dir)
		for _, entry := range entries {
			run := filepath.Join(dir, entry.Name())
			if pid, _, ok := readPID(run); ok && runnerAlive(pid, run) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})
}

// runners counts live processes whose command line holds path.
func runners(t *testing.T, path string) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range procs {
		if data, err := os.ReadFile(p); err == nil && strings.Contains(string(data), path) {
			n++
		}
	}
	return n
}

func TestLocalExecutorRunSucceeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killRunners(t, dir)
	e := testExecutor(t, dir)
	ctx := context.Background()
	req := nodeRequest(t, "node-e-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), nil)

	if err := e.Start(ctx, req); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, req.Name)
	pid := testenv.ReadFile(t, filepath.Join(runDir, PIDFileName))
	st, err := e.Status(ctx, req.Name, "")
	if err != nil || st.Phase != RunRunning || st.Result != nil {
		t.Fatalf("status after start: %+v, %v", st, err)
	}
	// Starting it again (the MaxConcurrent of 1 is used up) does nothing.
	if err := e.Start(ctx, req); err != nil {
		t.Fatalf("second start: %v", err)
	}
	if again := testenv.ReadFile(t, filepath.Join(runDir, PIDFileName)); again != pid {
		t.Errorf("pid changed from %s to %s", pid, again)
	}
	reqPath := filepath.Join(runDir, tfrunner.RequestFileName)
	if n := runners(t, reqPath); n != 1 {
		t.Errorf("%d runners, want 1", n)
	}
	// The runner removes the request once it has read it (--remove-request); until then only
	// its owner may read it.
	if info, err := os.Stat(reqPath); err == nil && info.Mode().Perm() != 0o600 {
		t.Errorf("request file mode %v, want 0600", info.Mode().Perm())
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("request file: %v", err)
	}

	testenv.Eventually(t, 40*time.Second, "the run to finish", func() bool {
		st, err = e.Status(ctx, req.Name, "")
		return err != nil || st.Phase != RunRunning
	})
	if err != nil || st.Phase != RunSucceeded || st.Result == nil {
		t.Fatalf("status: %+v, %v\n%s", st, err, testenv.ReadFile(t, st.LogPath))
	}
	if !strings.HasPrefix(st.Result.ProviderID, "sim://node-e-apply-1/") || len(st.Result.Outputs) == 0 {
		t.Errorf("result: %+v", st.Result)
	}
	if st.LogPath != filepath.Join(runDir, LogFileName) || st.StartTime.IsZero() {
		t.Errorf("status: %+v", st)
	}
	log := testenv.ReadFile(t, st.LogPath)
	if !strings.Contains(log, `"type":"apply_complete"`) || !strings.Contains(log, "apply of run node-e-apply-1 succeeded") {
		t.Errorf("run log:\n%s", log)
	}
	assertNoSecret(t, "run.log", log)
	if _, err := os.Stat(reqPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the request, with its user data, outlived the run: %v", err)
	}
}

// A run outlives the executor that started it: another executor on the same folder (a
// restarted controller) sees it running, counts it against its limit and cancels it.
func TestLocalExecutorAdoptsAndCancels(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killRunners(t, dir)
	ctx := context.Background()
	state := filepath.Join(t.TempDir(), "state.tfstate")
	req := nodeRequest(t, "node-g-apply-1", "node", state, map[string]string{"sleep_seconds": "30"})
	first := testExecutor(t, dir)
	if err := first.Start(ctx, req); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, req.Name, LogFileName)
	testenv.Eventually(t, 30*time.Second, "the run to provision", func() bool {
		data, _ := os.ReadFile(logPath)
		return provisioning(string(data))
	})
	before, err := first.Status(ctx, req.Name, "")
	if err != nil {
		t.Fatal(err)
	}

	second := testExecutor(t, dir)
	st, err := second.Status(ctx, req.Name, "")
	if err != nil || st.Phase != RunRunning || !st.StartTime.Equal(before.StartTime) {
		t.Fatalf("adopted status: %+v, %v (first saw %+v)", st, err, before)
	}
	other := nodeRequest(t, "node-h-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), nil)
	if err := second.Start(ctx, other); !errors.Is(err, ErrBusy) {
		t.Errorf("start beyond MaxConcurrent: %v, want ErrBusy", err)
	}

	cancelled := time.Now()
	if err := second.Cancel(ctx, req.Name, ""); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(cancelled); took > 5*time.Second {
		t.Errorf("cancel took %s", took)
	}
	waitEnded(t, second, req.Name)
	st, err = second.Status(ctx, req.Name, "")
	if err != nil || st.Phase != RunFailed || st.Result == nil || st.Result.Error == nil || st.Result.Error.Class != tfrunner.Cancelled {
		t.Fatalf("status after cancel: %+v, %v\n%s", st, err, testenv.ReadFile(t, logPath))
	}
	if err := second.Cancel(ctx, req.Name, ""); err != nil {
		t.Errorf("cancelling a finished run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(state), ".state.tfstate.lock.info")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock info left behind: %v", err)
	}
}

func TestLocalExecutorLostRuns(t *testing.T) {
	dir := t.TempDir()
	e := testExecutor(t, dir)
	ctx := context.Background()

	if _, err := e.Status(ctx, "nope", ""); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("status of unknown run: %v", err)
	}
	if err := e.Cancel(ctx, "nope", ""); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("cancel of unknown run: %v", err)
	}

	// A runner that died without writing its result (killed, out of memory).
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	lost := filepath.Join(dir, "lost-apply-1")
	if err := os.MkdirAll(lost, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := tfrunner.WriteRequest(filepath.Join(lost, tfrunner.RequestFileName), tfrunner.Request{Name: "lost-apply-1", Operation: tfrunner.Apply}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lost, PIDFileName), []byte(strconv.Itoa(dead.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := e.Status(ctx, "lost-apply-1", "")
	if err != nil || st.Phase != RunFailed || st.Result.Error.Class != tfrunner.Unknown ||
		st.Result.Error.Message != "runner exited without a result" || st.Result.Operation != tfrunner.Apply {
		t.Errorf("lost run: %+v %+v, %v", st, st.Result, err)
	}
	if err := e.Cancel(ctx, "lost-apply-1", ""); err != nil {
		t.Errorf("cancel of a dead run: %v", err)
	}

	// A folder without a pid file is being started, until that takes too long.
	starting := filepath.Join(dir, "starting-apply-1")
	if err := os.Mkdir(starting, 0o700); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Status(ctx, "starting-apply-1", ""); err != nil || st.Phase != RunPending {
		t.Errorf("starting run: %+v, %v", st, err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(starting, old, old); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Status(ctx, "starting-apply-1", ""); err != nil || st.Phase != RunFailed || st.Result.Error.Message != "runner was not started" {
		t.Errorf("never started run: %+v, %v", st, err)
	}
}

// A run's runner and every process it starts get the executor's niceness, whether they
// started before the executor set it or after; when the runner ends, OnEnd hears of it, and
// until then Status says so (EndReported).
func TestLocalExecutorRunsNice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killRunners(t, dir)
	// The "runner" waits until the test has seen Start return, then has a child (cut) read
	// its own niceness (field 19 of /proc/self/stat), and ends when the test says.
	script := `while [ ! -e go ]; do sleep 0.05; done; cut -d' ' -f19 /proc/self/stat > nice.tmp && mv nice.tmp nice; while [ ! -e done ]; do sleep 0.05; done`
	ended := make(chan string, 1)
	e := &Local{Dir: dir, Command: []string{"sh", "-c", script, "sh"}, Limiter: NewLimiter(MaxRuns(1)), Nice: 7,
		OnEnd: func(name string, labels map[string]string) { ended <- name + " " + labels[keys.LabelNodeClaim] }}
	req := nodeRequest(t, "node-n-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), nil)
	req.Labels = map[string]string{keys.LabelNodeClaim: "node-n"}
	if err := e.Start(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, req.Name)
	if err := os.WriteFile(filepath.Join(runDir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		data, err := os.ReadFile(filepath.Join(runDir, "nice"))
		if err == nil {
			if got := strings.TrimSpace(string(data)); got != "7" {
				t.Fatalf("a run's child has niceness %s, want 7", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never reported its niceness: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// While it runs, this executor says it will report its end; another on the same folder
	// (a restarted controller adopting it) does not.
	if st, err := e.Status(context.Background(), req.Name, ""); err != nil || st.Phase != RunRunning || !st.EndReported {
		t.Errorf("status of a run it reaps: %+v, %v; want Running with its end reported", st, err)
	}
	adopter := &Local{Dir: dir, Command: e.Command, Limiter: NewLimiter(MaxRuns(1)), OnEnd: e.OnEnd}
	if st, err := adopter.Status(context.Background(), req.Name, ""); err != nil || st.Phase != RunRunning || st.EndReported {
		t.Errorf("status of an adopted run: %+v, %v; want Running, its end not reported", st, err)
	}
	if err := os.WriteFile(filepath.Join(runDir, "done"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ended:
		if got != "node-n-apply-1 node-n" {
			t.Errorf("OnEnd heard of %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("OnEnd was not called when the runner ended")
	}
}

// The local executor starts the runner binary when it lies beside its own binary (else its
// own binary's `run`), and gives provisioners its own binary either way.
func TestRunnerBeside(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "fulfiller-dev")
	env := []string{"FULFILLER_BINARY=" + exe}
	if command, gotEnv := RunnerBeside(exe); !slices.Equal(command, []string{exe, "run"}) || !slices.Equal(gotEnv, env) {
		t.Errorf("without a runner binary: %q, %q", command, gotEnv)
	}
	runner := filepath.Join(dir, RunnerBinary)
	if err := os.WriteFile(runner, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if command, gotEnv := RunnerBeside(exe); !slices.Equal(command, []string{runner}) || !slices.Equal(gotEnv, env) {
		t.Errorf("with a runner binary: %q, %q", command, gotEnv)
	}
}
