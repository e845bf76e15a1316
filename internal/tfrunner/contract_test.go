package tfrunner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// contract is what executorContract needs to know about an executor.
type contract struct {
	// newExecutor returns an executor for one subtest (they run in parallel; run names are
	// unique within the suite).
	newExecutor func(t *testing.T) Executor
	// logs returns the run log of a run the way its users read it.
	logs func(t *testing.T, st RunStatus) string
	// cancelledGone: after Cancel the run no longer exists (ErrRunNotFound) instead of
	// reporting Failed with class Cancelled.
	cancelledGone bool
}

// executorContract is the behaviour every Executor shows: the same requests give the same
// results whether a run is a child process or a Kubernetes Job.
func executorContract(t *testing.T, c contract) {
	ctx := context.Background()

	t.Run("ApplyOutputsDestroy", func(t *testing.T) {
		t.Parallel()
		e := c.newExecutor(t)
		state := filepath.Join(t.TempDir(), "state.tfstate")
		record := t.TempDir()
		req := nodeRequest(t, "contract-a-apply-1", "node", state, map[string]string{"record_dir": record})
		if err := e.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		first, err := e.Status(ctx, req.Name)
		if err != nil || first.Phase == RunSucceeded || first.Phase == RunFailed {
			t.Fatalf("status after start: %+v, %v", first, err)
		}
		// Starting it again starts nothing.
		if err := e.Start(ctx, req); err != nil {
			t.Fatalf("second start: %v", err)
		}
		st := waitDone(t, e, req.Name)
		if st.Phase != RunSucceeded || st.Result == nil || !st.Result.Succeeded {
			t.Fatalf("apply: %+v %+v\n%s", st, st.Result, c.logs(t, st))
		}
		if !st.StartTime.Equal(first.StartTime) {
			t.Errorf("start time moved from %s to %s: a second run?", first.StartTime, st.StartTime)
		}
		res := st.Result
		if !strings.HasPrefix(res.ProviderID, "sim://contract-a-apply-1/") || res.NodeName != "contract-a-apply-1" ||
			len(res.Addresses) != 2 || string(res.Outputs["node_name"]) != `"contract-a-apply-1"` || res.Operation != Apply {
			t.Errorf("result: %+v", res)
		}
		if data, err := os.ReadFile(filepath.Join(record, "user_data")); err != nil || string(data) != testUserData {
			t.Errorf("the module saw user data %q (%v)", data, err)
		}
		log := c.logs(t, st)
		if !strings.Contains(log, `"type":"apply_complete"`) || !strings.Contains(log, "apply of run contract-a-apply-1 succeeded") {
			t.Errorf("run log:\n%s", log)
		}
		assertNoSecret(t, "run log", log)

		destroy := nodeRequest(t, "contract-a-destroy-1", "node", state, map[string]string{"record_dir": record})
		destroy.Operation = Destroy
		if err := e.Start(ctx, destroy); err != nil {
			t.Fatal(err)
		}
		st = waitDone(t, e, destroy.Name)
		if st.Phase != RunSucceeded || st.Result.Operation != Destroy || st.Result.ProviderID != "" {
			t.Fatalf("destroy: %+v %+v\n%s", st, st.Result, c.logs(t, st))
		}
		if _, err := os.Stat(filepath.Join(record, "destroyed")); err != nil {
			t.Errorf("the destroy provisioner did not run: %v", err)
		}
	})

	failures := []struct {
		name   string
		module string
		params map[string]string
		class  ErrorClass
	}{
		{"contract-b-apply-1", "node", map[string]string{"fail_with": simulatedAPIErrors["resource-unavailable"]}, Capacity},
		{"contract-c-apply-1", "undeclared-reference", nil, InvalidModule},
	}
	for _, f := range failures {
		t.Run(string(f.class), func(t *testing.T) {
			t.Parallel()
			e := c.newExecutor(t)
			req := nodeRequest(t, f.name, f.module, filepath.Join(t.TempDir(), "state.tfstate"), f.params)
			if err := e.Start(ctx, req); err != nil {
				t.Fatal(err)
			}
			st := waitDone(t, e, req.Name)
			if st.Phase != RunFailed || st.Result == nil || st.Result.Error == nil || st.Result.Error.Class != f.class ||
				st.Result.Succeeded || st.Result.ProviderID != "" {
				t.Fatalf("status: %+v %+v\n%s", st, st.Result, c.logs(t, st))
			}
			if st.Result.Error.Message == "" || strings.Contains(st.Result.Error.Message, "\n") {
				t.Errorf("message %q", st.Result.Error.Message)
			}
		})
	}

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		e := c.newExecutor(t)
		state := filepath.Join(t.TempDir(), "state.tfstate")
		req := nodeRequest(t, "contract-d-apply-1", "node", state, map[string]string{"sleep_seconds": "60"})
		if err := e.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		lockInfo := filepath.Join(filepath.Dir(state), ".state.tfstate.lock.info")
		eventually(t, 60*time.Second, "the run to provision, holding the lock", func() bool {
			st, err := e.Status(ctx, req.Name)
			if err != nil || st.Phase != RunRunning {
				return false
			}
			_, err = os.Stat(lockInfo)
			return err == nil && provisioning(c.logs(t, st))
		})
		started := time.Now()
		if err := e.Cancel(ctx, req.Name); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(started); took > 20*time.Second {
			t.Errorf("cancel took %s", took)
		}
		if _, err := os.Stat(lockInfo); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the state lock was not released: %v", err)
		}
		st, err := e.Status(ctx, req.Name)
		switch {
		case c.cancelledGone:
			if !errors.Is(err, ErrRunNotFound) {
				t.Errorf("status after cancel: %+v, %v; want ErrRunNotFound", st, err)
			}
		case err != nil || st.Phase != RunFailed || st.Result.Error == nil || st.Result.Error.Class != Cancelled:
			t.Errorf("status after cancel: %+v %+v, %v", st, st.Result, err)
		}
	})

	t.Run("Deadline", func(t *testing.T) {
		t.Parallel()
		e := c.newExecutor(t)
		state := filepath.Join(t.TempDir(), "state.tfstate")
		req := nodeRequest(t, "contract-e-apply-1", "node", state, map[string]string{"sleep_seconds": "60"})
		req.Deadline = 6 * time.Second
		if err := e.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		st := waitDone(t, e, req.Name)
		if st.Phase != RunFailed || st.Result == nil || st.Result.Error == nil || st.Result.Error.Class != Timeout {
			t.Fatalf("a run past its deadline: %+v %+v\n%s", st, st.Result, c.logs(t, st))
		}
		// The runner interrupted tofu, which released the lock.
		if _, err := os.Stat(filepath.Join(filepath.Dir(state), ".state.tfstate.lock.info")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the state lock was not released: %v", err)
		}
	})

	t.Run("UnknownRun", func(t *testing.T) {
		t.Parallel()
		e := c.newExecutor(t)
		if _, err := e.Status(ctx, "contract-nope-apply-1"); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("status: %v", err)
		}
		if err := e.Cancel(ctx, "contract-nope-apply-1"); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("cancel: %v", err)
		}
		if _, err := e.Status(ctx, "Not A Name"); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("status of an invalid name: %v", err)
		}
	})
}

// waitDone polls a run's status until it has finished.
func waitDone(t *testing.T, e Executor, name string) RunStatus {
	t.Helper()
	var st RunStatus
	var err error
	eventually(t, 90*time.Second, "run "+name+" to finish", func() bool {
		st, err = e.Status(context.Background(), name)
		return err != nil || st.Phase == RunSucceeded || st.Phase == RunFailed
	})
	if err != nil {
		t.Fatalf("status of %s: %v", name, err)
	}
	return st
}

func TestLocalExecutorContract(t *testing.T) {
	executorContract(t, contract{
		newExecutor: func(t *testing.T) Executor {
			dir := t.TempDir()
			killRunners(t, dir)
			e := testExecutor(t, dir)
			e.MaxConcurrent = 4
			return e
		},
		logs: func(t *testing.T, st RunStatus) string {
			data, _ := os.ReadFile(st.LogPath)
			return string(data)
		},
	})
}
