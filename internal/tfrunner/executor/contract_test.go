// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Contract is what ExecutorContract needs to know about an executor. It is exported (in a
// test file) for the fake executor's run of the suite, in package tfrunner_test.
type Contract struct {
	// NewExecutor returns an executor for one subtest (they run in parallel; run names are
	// unique within the suite).
	NewExecutor func(t *testing.T) Executor
	// Logs returns the run log of a run the way its users read it.
	Logs func(t *testing.T, st RunStatus) string
	// CancelledGone: after Cancel the run no longer exists (ErrRunNotFound) instead of
	// reporting Failed with class Cancelled.
	CancelledGone bool
	// RunnerPod returns the name of a run's runner pod, for executors that have pods.
	RunnerPod func(t *testing.T, run string) string
	// RequestExists reports whether the run's request (with its user data and credentials)
	// is still stored where the executor put it for the runner.
	RequestExists func(t *testing.T, e Executor, run string) bool
	// Script is set for an executor that runs no tofu (the fake): it tells the executor how
	// the run of req goes, where the suite's module would behave as b. The suite then checks
	// what the executor itself does (phases, idempotent starts, cancelling, deadlines, claim
	// ownership, requests removed, lock attribution), not what the module did. Nil for the
	// executors that run tofu: their requests carry b to the module.
	Script func(t *testing.T, e Executor, req tfrunner.Request, b Behaviour)
}

// Behaviour is how the suite's module behaves in a run.
type Behaviour struct {
	// Fail: the run fails with this class (the module's simulated API error, or a broken
	// module).
	Fail tfrunner.ErrorClass
	// Hold: the module sits in its provisioner, holding the state lock, for a long while.
	Hold bool
	// StopDelay: once interrupted, the run takes this long to stop.
	StopDelay time.Duration
}

// runsTofu reports whether the executor runs the suite's module with tofu.
func (c Contract) runsTofu() bool { return c.Script == nil }

// request is the suite's request name of the module (params select its behaviour in tofu),
// scripted to behave as b for an executor that runs no tofu.
func (c Contract) request(t *testing.T, e Executor, name, module, state string, params map[string]string, b Behaviour) tfrunner.Request {
	t.Helper()
	req := nodeRequest(t, name, module, state, params)
	if b.StopDelay > 0 {
		req.TofuPath = slowStopTofu(t, b.StopDelay)
	}
	if c.Script != nil {
		c.Script(t, e, req, b)
	}
	return req
}

// provisioning waits until the run is in its module's provisioner, holding its state lock
// (lockInfo; for an executor that runs no tofu, until it runs).
func (c Contract) provisioning(t *testing.T, e Executor, name, lockInfo string) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, "run "+name+" to provision, holding the lock", func() bool {
		st, err := e.Status(context.Background(), name, "")
		if err != nil || st.Phase != RunRunning {
			return false
		}
		if !c.runsTofu() {
			return true
		}
		_, err = os.Stat(lockInfo)
		return err == nil && provisioning(c.Logs(t, st))
	})
}

// lockReleased checks that tofu released the state lock whose info file is lockInfo.
func (c Contract) lockReleased(t *testing.T, what, lockInfo string) {
	t.Helper()
	if !c.runsTofu() {
		return
	}
	if _, err := os.Stat(lockInfo); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state lock %s was not released: %v", what, err)
	}
}

// ExecutorContract is the behaviour every Executor shows: the same requests give the same
// results whether a run is a child process or a Kubernetes Job, and the fake behaves alike.
func ExecutorContract(t *testing.T, c Contract) {
	ctx := context.Background()

	t.Run("ApplyOutputsDestroy", func(t *testing.T) {
		t.Parallel()
		e := c.NewExecutor(t)
		state := filepath.Join(t.TempDir(), "state.tfstate")
		record := t.TempDir()
		req := c.request(t, e, "contract-a-apply-1", "node", state, map[string]string{"record_dir": record}, Behaviour{})
		if err := e.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		first, err := e.Status(ctx, req.Name, "")
		if err != nil || first.Phase == RunSucceeded || first.Phase == RunFailed {
			t.Fatalf("status after start: %+v, %v", first, err)
		}
		// Starting it again starts nothing.
		if err := e.Start(ctx, req); err != nil {
			t.Fatalf("second start: %v", err)
		}
		st := waitDone(t, e, req.Name)
		if st.Phase != RunSucceeded || st.Result == nil || !st.Result.Succeeded {
			t.Fatalf("apply: %+v %+v\n%s", st, st.Result, c.Logs(t, st))
		}
		if !st.StartTime.Equal(first.StartTime) {
			t.Errorf("start time moved from %s to %s: a second run?", first.StartTime, st.StartTime)
		}
		// The request held the user data: gone once the run has finished, while the log stays.
		if c.RequestExists(t, e, req.Name) {
			t.Errorf("the request of finished run %s is still stored", req.Name)
		}
		res := st.Result
		if res.ProviderID == "" || res.NodeName != "contract-a-apply-1" || res.Operation != tfrunner.Apply {
			t.Errorf("result: %+v", res)
		}
		if c.runsTofu() {
			if !strings.HasPrefix(res.ProviderID, "sim://contract-a-apply-1/") || len(res.Addresses) != 2 ||
				string(res.Outputs["node_name"]) != `"contract-a-apply-1"` {
				t.Errorf("result: %+v", res)
			}
			if data, err := os.ReadFile(filepath.Join(record, "user_data")); err != nil || string(data) != testUserData {
				t.Errorf("the module saw user data %q (%v)", data, err)
			}
			log := c.Logs(t, st)
			if !strings.Contains(log, `"type":"apply_complete"`) || !strings.Contains(log, "apply of run contract-a-apply-1 succeeded") {
				t.Errorf("run log:\n%s", log)
			}
			assertNoSecret(t, "run log", log)
		}

		destroy := nodeRequest(t, "contract-a-destroy-1", "node", state, map[string]string{"record_dir": record})
		destroy.Operation = tfrunner.Destroy
		if c.Script != nil {
			c.Script(t, e, destroy, Behaviour{})
		}
		if err := e.Start(ctx, destroy); err != nil {
			t.Fatal(err)
		}
		st = waitDone(t, e, destroy.Name)
		if st.Phase != RunSucceeded || st.Result.Operation != tfrunner.Destroy || st.Result.ProviderID != "" {
			t.Fatalf("destroy: %+v %+v\n%s", st, st.Result, c.Logs(t, st))
		}
		if _, err := os.Stat(filepath.Join(record, "destroyed")); c.runsTofu() && err != nil {
			t.Errorf("the destroy provisioner did not run: %v", err)
		}
	})

	failures := []struct {
		name   string
		module string
		params map[string]string
		class  tfrunner.ErrorClass
		// inLog is in the rendered log tail of a run that runs tofu.
		inLog string
	}{
		{"contract-b-apply-1", "node", map[string]string{"fail_with": "resource_unavailable: server type cx22 unavailable in fsn1"}, tfrunner.Capacity, "resource_unavailable"},
		{"contract-c-apply-1", "undeclared-reference", nil, tfrunner.InvalidModule, "Reference to undeclared"},
	}
	for _, f := range failures {
		t.Run(string(f.class), func(t *testing.T) {
			t.Parallel()
			e := c.NewExecutor(t)
			req := c.request(t, e, f.name, f.module, filepath.Join(t.TempDir(), "state.tfstate"), f.params, Behaviour{Fail: f.class})
			req.Labels = map[string]string{keys.LabelNodeClaimUID: "uid-" + f.name}
			if err := e.Start(ctx, req); err != nil {
				t.Fatal(err)
			}
			st := waitDone(t, e, req.Name)
			if st.Phase != RunFailed || st.Result == nil || st.Result.Error == nil || st.Result.Error.Class != f.class ||
				st.Result.Succeeded || st.Result.ProviderID != "" {
				t.Fatalf("status: %+v %+v\n%s", st, st.Result, c.Logs(t, st))
			}
			if st.Result.Error.Message == "" || strings.Contains(st.Result.Error.Message, "\n") {
				t.Errorf("message %q", st.Result.Error.Message)
			}
			if c.RequestExists(t, e, req.Name) {
				t.Errorf("the request of failed run %s is still stored", req.Name)
			}
			checkLogTail(t, c, e, req, f.inLog)
		})
	}

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		e := c.NewExecutor(t)
		state := filepath.Join(t.TempDir(), "state.tfstate")
		req := c.request(t, e, "contract-d-apply-1", "node", state, map[string]string{"sleep_seconds": "60"}, Behaviour{Hold: true})
		if err := e.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		lockInfo := filepath.Join(filepath.Dir(state), ".state.tfstate.lock.info")
		c.provisioning(t, e, req.Name, lockInfo)
		if err := e.Cancel(ctx, req.Name, ""); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, e, req.Name)
		c.lockReleased(t, "of the cancelled run", lockInfo)
		if c.CancelledGone {
			testenv.Eventually(t, time.Minute, "the cancelled run to be gone", func() bool {
				_, err := e.Status(ctx, req.Name, "")
				return errors.Is(err, ErrRunNotFound)
			})
		}
		st, err := e.Status(ctx, req.Name, "")
		switch {
		case c.CancelledGone:
			if !errors.Is(err, ErrRunNotFound) {
				t.Errorf("status after cancel: %+v, %v; want ErrRunNotFound", st, err)
			}
		case err != nil || st.Phase != RunFailed || st.Result.Error == nil || st.Result.Error.Class != tfrunner.Cancelled:
			t.Errorf("status after cancel: %+v %+v, %v", st, st.Result, err)
		}
		if err := e.Cancel(ctx, req.Name, ""); err != nil && !errors.Is(err, ErrRunNotFound) {
			t.Errorf("cancelling an ended run: %v", err)
		}
	})

	// A run name at the limit of 63 characters (a claim of a 63-character NodePool name):
	// started, found, and its state lock attributed to it while it runs and once it is gone.
	t.Run("LongName", func(t *testing.T) {
		t.Parallel()
		e := c.NewExecutor(t)
		name := tfrunner.RunName("contract-f-"+strings.Repeat("l", 52), tfrunner.Apply, 1)
		if len(name) != 63 {
			t.Fatalf("run name %q has %d characters", name, len(name))
		}
		state := filepath.Join(t.TempDir(), "state.tfstate")
		req := c.request(t, e, name, "node", state, map[string]string{"sleep_seconds": "20"}, Behaviour{Hold: true})
		if err := e.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		lockInfo := filepath.Join(filepath.Dir(state), ".state.tfstate.lock.info")
		c.provisioning(t, e, name, lockInfo)
		// tofu records user@hostname; a runner's hostname is its run's name.
		owner := LockOwner{Who: "fulfiller@" + name, Created: time.Now()}
		if c.runsTofu() {
			owner = readLockOwner(t, lockInfo)
		}
		if c.RunnerPod != nil {
			// The Job controller cuts a long Job name short in its pod's name.
			pod := c.RunnerPod(t, name)
			if strings.HasPrefix(pod, name+"-") || len(pod) > 63 {
				t.Errorf("runner pod %q of run %s", pod, name)
			}
		}
		attributor, ok := e.(LockAttributor)
		if !ok {
			t.Fatalf("%T attributes no locks", e)
		}
		runs := []string{"contract-f-other-apply-1", name}
		a, err := attributor.AttributeLock(ctx, owner, runs)
		if err != nil || a.Run != name || a.Gone {
			t.Fatalf("lock of %s held by %s: attributed %+v, %v", name, owner.Who, a, err)
		}
		if a, err := attributor.AttributeLock(ctx, LockOwner{Who: "root@laptop", Created: owner.Created}, runs); err != nil || a.Run != "" {
			t.Errorf("a lock taken by someone else attributed %+v, %v", a, err)
		}
		if err := e.Cancel(ctx, name, ""); err != nil {
			t.Fatal(err)
		}
		// A local runner's session is gone once the provisioner it left has ended, too.
		testenv.Eventually(t, 90*time.Second, "the runner to be gone", func() bool {
			a, err = attributor.AttributeLock(ctx, owner, runs)
			return err == nil && a.Run == name && a.Gone
		})
	})

	// A run's name is taken by a run of an earlier claim of the same name (deleted and made
	// again): that run is not this claim's to adopt, read or cancel.
	t.Run("OtherClaim", func(t *testing.T) {
		t.Parallel()
		e := c.NewExecutor(t)
		req := c.request(t, e, "contract-g-apply-1", "node", filepath.Join(t.TempDir(), "state.tfstate"), nil, Behaviour{})
		req.Labels = map[string]string{keys.LabelNodeClaimUID: "uid-old"}
		if err := e.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		if st := waitDone(t, e, req.Name); st.Phase != RunSucceeded {
			t.Fatalf("status: %+v %+v", st, st.Result)
		}
		again := req
		again.Labels = map[string]string{keys.LabelNodeClaimUID: "uid-new"}
		if err := e.Start(ctx, again); !errors.Is(err, ErrOtherClaimsRun) {
			t.Fatalf("start of a run whose name an earlier claim's run has: %v, want ErrOtherClaimsRun", err)
		}
		if _, err := e.Status(ctx, req.Name, "uid-new"); !errors.Is(err, ErrOtherClaimsRun) {
			t.Errorf("status of another claim's run: %v, want ErrOtherClaimsRun", err)
		}
		if err := e.Cancel(ctx, req.Name, "uid-new"); !errors.Is(err, ErrOtherClaimsRun) {
			t.Errorf("cancel of another claim's run: %v, want ErrOtherClaimsRun", err)
		}
		if st, err := e.Status(ctx, req.Name, "uid-old"); err != nil || st.Phase != RunSucceeded {
			t.Errorf("status for the run's own claim: %+v, %v", st, err)
		}
		if err := e.Start(ctx, req); err != nil {
			t.Errorf("starting the run again for its own claim: %v", err)
		}
	})

	// Deleting many claims at once: their cancels return at once, while the runners take
	// their time to stop (tofu finishing a provider call), so a controller's few workers are
	// free for other claims' joins. Status says the runs are stopping until they have ended.
	t.Run("CancelDoesNotBlock", func(t *testing.T) {
		t.Parallel()
		e := c.NewExecutor(t)
		const stopDelay = 10 * time.Second
		names := []string{"contract-h-apply-1", "contract-i-apply-1", "contract-j-apply-1"}
		locks := map[string]string{}
		for _, name := range names {
			state := filepath.Join(t.TempDir(), "state.tfstate")
			req := c.request(t, e, name, "node", state, map[string]string{"sleep_seconds": "60"}, Behaviour{Hold: true, StopDelay: stopDelay})
			if err := e.Start(ctx, req); err != nil {
				t.Fatal(err)
			}
			locks[name] = filepath.Join(filepath.Dir(state), ".state.tfstate.lock.info")
		}
		for _, name := range names {
			c.provisioning(t, e, name, locks[name])
		}
		// Two workers, fewer than the claims being deleted; the join comes last.
		work := make(chan func(), len(names)+1)
		var mu sync.Mutex
		took := map[string]time.Duration{}
		for _, name := range names {
			work <- func() {
				started := time.Now()
				if err := e.Cancel(ctx, name, ""); err != nil {
					t.Errorf("cancel %s: %v", name, err)
				}
				mu.Lock()
				took[name] = time.Since(started)
				mu.Unlock()
			}
		}
		joined := make(chan time.Time, 1)
		work <- func() { joined <- time.Now() }
		close(work)
		began := time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for f := range work {
					f()
				}
			})
		}
		select {
		case at := <-joined:
			if wait := at.Sub(began); wait > 5*time.Second {
				t.Errorf("the join waited %s behind %d cancels", wait.Round(time.Millisecond), len(names))
			}
		case <-time.After(3*stopDelay + time.Minute):
			t.Fatal("the join never got a worker")
		}
		wg.Wait()
		for _, name := range names {
			if took[name] > 3*time.Second {
				t.Errorf("cancel of %s took %s", name, took[name].Round(time.Millisecond))
			}
			if st, err := e.Status(ctx, name, ""); err != nil || st.Phase != RunStopping {
				t.Errorf("status of %s right after cancel: %+v, %v; want Stopping", name, st, err)
			}
		}
		for _, name := range names {
			waitEnded(t, e, name)
			c.lockReleased(t, "of "+name, locks[name])
		}
	})

	t.Run("Deadline", func(t *testing.T) {
		t.Parallel()
		e := c.NewExecutor(t)
		state := filepath.Join(t.TempDir(), "state.tfstate")
		req := c.request(t, e, "contract-e-apply-1", "node", state, map[string]string{"sleep_seconds": "60"}, Behaviour{Hold: true})
		req.Deadline = 6 * time.Second
		if err := e.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		st := waitDone(t, e, req.Name)
		if st.Phase != RunFailed || st.Result == nil || st.Result.Error == nil || st.Result.Error.Class != tfrunner.Timeout {
			t.Fatalf("a run past its deadline: %+v %+v\n%s", st, st.Result, c.Logs(t, st))
		}
		// The runner interrupted tofu, which released the lock.
		c.lockReleased(t, "of the run past its deadline", filepath.Join(filepath.Dir(state), ".state.tfstate.lock.info"))
	})

	t.Run("UnknownRun", func(t *testing.T) {
		t.Parallel()
		e := c.NewExecutor(t)
		if _, err := e.Status(ctx, "contract-nope-apply-1", ""); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("status: %v", err)
		}
		if err := e.Cancel(ctx, "contract-nope-apply-1", ""); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("cancel: %v", err)
		}
		if _, err := e.Status(ctx, "Not A Name", ""); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("status of an invalid name: %v", err)
		}
	})
}

// checkLogTail checks what a LogTailer reads back of a failed run: the end of its log, with
// the diagnostic that failed it (naming inLog, for an executor that runs tofu), bounded; none
// for another claim or an unknown run.
func checkLogTail(t *testing.T, c Contract, e Executor, req tfrunner.Request, inLog string) {
	t.Helper()
	tailer, ok := e.(LogTailer)
	if !ok {
		t.Fatalf("%T is no LogTailer", e)
	}
	ctx := context.Background()
	tail, err := tailer.LogTail(ctx, req.Name, req.Labels[keys.LabelNodeClaimUID])
	if err != nil {
		t.Fatalf("log tail of %s: %v", req.Name, err)
	}
	lines := strings.Split(strings.TrimRight(string(tail), "\n"), "\n")
	if len(lines) > tfrunner.LogTailLines || len(tail) > tfrunner.LogTailBytes {
		t.Errorf("log tail of %s: %d lines, %d bytes", req.Name, len(lines), len(tail))
	}
	diagnostic := false
	for _, l := range lines {
		if d, ok := tfrunner.ParseDiagnostic([]byte(l)); ok && d.Severity == "error" {
			diagnostic = true
		}
	}
	rendered := tfrunner.RenderLog(tail)
	if !diagnostic || c.runsTofu() && !strings.Contains(rendered, inLog) {
		t.Errorf("log tail of %s has no error diagnostic naming %q:\n%s", req.Name, inLog, rendered)
	}
	if _, err := tailer.LogTail(ctx, req.Name, "uid-of-another-claim"); !errors.Is(err, ErrOtherClaimsRun) {
		t.Errorf("log tail of %s for another claim: %v", req.Name, err)
	}
	if _, err := tailer.LogTail(ctx, "contract-nope-apply-1", ""); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("log tail of an unknown run: %v", err)
	}
}

// readLockOwner reads who holds a local-backend state lock from its lock info file.
func readLockOwner(t *testing.T, path string) LockOwner {
	t.Helper()
	var info struct {
		Who     string
		Created time.Time
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &info); err != nil || info.Who == "" {
		t.Fatalf("lock info %s: %v", data, err)
	}
	return LockOwner{Who: info.Who, Created: info.Created}
}

// waitEnded polls a cancelled run's status until its runner has ended: the run has finished
// or no longer exists.
func waitEnded(t *testing.T, e Executor, name string) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "run "+name+" to end", func() bool {
		st, err := e.Status(context.Background(), name, "")
		return errors.Is(err, ErrRunNotFound) || err == nil && (st.Phase == RunSucceeded || st.Phase == RunFailed)
	})
}

// waitDone polls a run's status until it has finished.
func waitDone(t *testing.T, e Executor, name string) RunStatus {
	t.Helper()
	var st RunStatus
	var err error
	testenv.Eventually(t, 90*time.Second, "run "+name+" to finish", func() bool {
		st, err = e.Status(context.Background(), name, "")
		return err != nil || st.Phase == RunSucceeded || st.Phase == RunFailed
	})
	if err != nil {
		t.Fatalf("status of %s: %v", name, err)
	}
	return st
}

func TestLocalExecutorContract(t *testing.T) {
	ExecutorContract(t, Contract{
		NewExecutor: func(t *testing.T) Executor {
			dir := t.TempDir()
			killRunners(t, dir)
			e := testExecutor(t, dir)
			e.Limiter = NewLimiter(MaxRuns(4))
			return e
		},
		Logs: func(t *testing.T, st RunStatus) string {
			data, _ := os.ReadFile(st.LogPath)
			return string(data)
		},
		RequestExists: func(t *testing.T, e Executor, run string) bool {
			_, err := os.Stat(filepath.Join(e.(*Local).Dir, run, tfrunner.RequestFileName))
			return err == nil
		},
	})
}
