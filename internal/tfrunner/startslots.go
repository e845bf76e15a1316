package tfrunner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// StartSlots bound how many runs on one machine are starting at once. From the runner's start
// until tofu begins its first change (the cloud call), a run costs only CPU: tofu and its
// providers starting, the module's data sources, the plan. Runs that start together share the
// CPUs, each takes longer, and all reach their cloud late; runs that start a few at a time
// reach it in turn, the first ones at once. A run holds a slot until its first change begins
// or for StartSlotHold, whichever comes first, and then waits for its cloud with the others.
// A slot is a lock file (flock), which the kernel releases when the runner dies.
type StartSlots struct {
	// Dir holds one lock file per slot; the runs of one executor share it.
	Dir string `json:"dir"`
	// Count is how many runs may be starting at once (0: no bound).
	Count int `json:"count"`
}

// StartSlotHold is the longest a run holds its start slot: a run still starting after that
// waits for something other than the CPUs (a held state lock, a slow data source), and must
// not keep the runs after it from starting.
const StartSlotHold = 5 * time.Second

// startSlotPoll is how often a run that waits for a start slot tries them again.
const startSlotPoll = 25 * time.Millisecond

// startSlot is a slot a run holds; release is idempotent and safe from any goroutine.
type startSlot struct {
	once  sync.Once
	file  *os.File
	timer *time.Timer
}

// takeStartSlot waits until the run holds one of s's slots, and returns it with how long
// it waited; nil when s sets no bound. The slot is released after hold at the latest.
func takeStartSlot(ctx context.Context, s StartSlots, hold time.Duration) (*startSlot, time.Duration, error) {
	if s.Count <= 0 || s.Dir == "" {
		return nil, 0, nil
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("start slots: %w", err)
	}
	files := make([]*os.File, s.Count)
	held := -1
	defer func() {
		for i, f := range files {
			if f != nil && i != held {
				_ = f.Close()
			}
		}
	}()
	for i := range files {
		f, err := os.OpenFile(filepath.Join(s.Dir, "slot-"+strconv.Itoa(i)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, 0, fmt.Errorf("start slots: %w", err)
		}
		files[i] = f
	}
	began := time.Now()
	first := os.Getpid() % s.Count // runs that look at once try different slots first
	for {
		for k := range s.Count {
			i := (first + k) % s.Count
			err := syscall.Flock(int(files[i].Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				held = i
				slot := &startSlot{file: files[i]}
				slot.timer = time.AfterFunc(hold, slot.release)
				return slot, time.Since(began), nil
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, 0, fmt.Errorf("start slots: locking %s: %w", files[i].Name(), err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("waiting for a start slot: %w", ctx.Err())
		case <-time.After(startSlotPoll):
		}
	}
}

// release gives the slot back (closing the file drops its lock).
func (s *startSlot) release() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		s.timer.Stop()
		_ = s.file.Close()
	})
}
