package tfrunner

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// TestStartSlots: a run takes a free slot at once, waits while all are held, gets one when
// it is released or its holder's hold time ends, and stops waiting when its context ends.
func TestStartSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	slots := StartSlots{Dir: filepath.Join(t.TempDir(), "slots"), Count: 2}
	if slot, _, err := takeStartSlot(ctx, StartSlots{}, time.Minute); slot != nil || err != nil {
		t.Fatalf("no bound: got a slot %v, %v", slot, err)
	}
	first, _, err := takeStartSlot(ctx, slots, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := takeStartSlot(ctx, slots, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}

	// Both are held: a third waits until the second's hold time ends.
	third, waited, err := takeStartSlot(ctx, slots, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if waited < 200*time.Millisecond {
		t.Errorf("the third run waited %s; the second held its slot for 300ms", waited)
	}
	second.release() // after its hold time ended: nothing happens

	// Both are held again: a fourth waits until one is released, or its context ends.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if slot, _, err := takeStartSlot(short, slots, time.Minute); slot != nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for a start slot") {
		t.Fatalf("with every slot held and its context ended: %v, %v", slot, err)
	}
	got := make(chan error, 1)
	go func() {
		slot, _, err := takeStartSlot(ctx, slots, time.Minute)
		slot.release()
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a run got a slot while both were held (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	first.release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a released slot was not taken")
	}
	third.release()
}

// TestRunHoldsStartSlotUntilFirstChange: a run waits for a start slot before anything else,
// says how long it waited, and gives the slot back when tofu begins its first change (here a
// machine that takes 3 s to create), not when it ends.
func TestRunHoldsStartSlotUntilFirstChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	slots := StartSlots{Dir: filepath.Join(t.TempDir(), "slots"), Count: 1}
	held, _, err := takeStartSlot(ctx, slots, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req := nodeRequest(t, "node-slot", "node", filepath.Join(t.TempDir(), "state.tfstate"), map[string]string{"sleep_seconds": "3"})
	req.StartSlots = slots
	var log testenv.SyncBuffer
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, req, &log, testRules) }()

	time.Sleep(500 * time.Millisecond)
	if text := log.String(); strings.Contains(text, "passing variables") {
		t.Fatalf("the run went on while the only start slot was held:\n%s", text)
	}
	held.release()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for !strings.Contains(log.String(), "passing variables") {
		select {
		case <-wait.Done():
			t.Fatalf("the run did not go on once the slot was free\n%s", log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The slot comes back while the machine is being created.
	again, _, err := takeStartSlot(wait, slots, time.Minute)
	if err != nil {
		t.Fatalf("the run kept its start slot: %v\n%s", err, log.String())
	}
	text := log.String()
	again.release()
	if !strings.Contains(text, `"type":"apply_start"`) || strings.Contains(text, "succeeded") {
		t.Errorf("the slot came back before the first change began or after the run ended:\n%s", text)
	}

	res := <-done
	if !res.Succeeded {
		t.Fatalf("the run failed: %+v\n%s", res.Error, log.String())
	}
	if !strings.Contains(log.String(), "runs of this machine may be starting at once") {
		t.Errorf("the log does not say the run waited for a start slot:\n%s", log.String())
	}
	i := slices.IndexFunc(res.Phases, func(p Phase) bool { return p.Name == PhaseSlot })
	if i != 1 || res.Phases[i].Wall < 400*time.Millisecond {
		t.Errorf("phases %+v: want the slot's wait of at least 500ms right after the start", res.Phases)
	}
}

// TestRunCancelledWaitingForStartSlot: cancelling a run that waits for a start slot ends it
// as Cancelled, before tofu ever ran.
func TestRunCancelledWaitingForStartSlot(t *testing.T) {
	t.Parallel()
	slots := StartSlots{Dir: filepath.Join(t.TempDir(), "slots"), Count: 1}
	held, _, err := takeStartSlot(context.Background(), slots, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	req := nodeRequest(t, "node-slot-cancel", "node", filepath.Join(t.TempDir(), "state.tfstate"), nil)
	req.StartSlots = slots
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var log testenv.SyncBuffer
	res := Run(ctx, req, &log, testRules)
	if res.Succeeded || res.Error == nil || res.Error.Class != Timeout {
		t.Fatalf("result %+v, want a timeout while waiting for a start slot\n%s", res.Error, log.String())
	}
	if strings.Contains(log.String(), "passing variables") {
		t.Errorf("the run went on without a slot:\n%s", log.String())
	}
}

// TestLocalExecutorStartSlots: a local executor's runs share StartingRunsPerCPU slots per CPU
// under its folder by default, as many as it is told, or none.
func TestLocalExecutorStartSlots(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		slots int
		want  StartSlots
	}{
		{0, StartSlots{Dir: filepath.Join(dir, ".start-slots"), Count: StartingRunsPerCPU * runtime.GOMAXPROCS(0)}},
		{3, StartSlots{Dir: filepath.Join(dir, ".start-slots"), Count: 3}},
		{-1, StartSlots{}},
	} {
		e := &LocalExecutor{Dir: dir, StartSlots: tc.slots}
		if got := e.startSlots(); got != tc.want {
			t.Errorf("StartSlots %d: %+v, want %+v", tc.slots, got, tc.want)
		}
	}
}
