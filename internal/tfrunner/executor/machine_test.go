// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestMachineRuns: the local executor's bound follows the machine's CPUs and memory,
// whichever is scarcer, and says so.
func TestMachineRuns(t *testing.T) {
	for _, c := range []struct {
		name   string
		m      MachineRuns
		max    int
		reason string
	}{
		{"CPU bound", MachineRuns{CPUs: 2, Memory: 24 << 30}, 64,
			"64 of 64 tofu runs in progress (this machine's bound: 2 CPUs at 32 runs each, 24.0Gi of memory at 256Mi a run): waiting for a runner"},
		{"memory bound", MachineRuns{CPUs: 16, Memory: 3 << 30}, 12,
			"12 of 12 tofu runs in progress (this machine's bound: 16 CPUs at 32 runs each, 3.0Gi of memory at 256Mi a run): waiting for a runner"},
		{"never below one", MachineRuns{CPUs: 1, Memory: 100 << 20}, 1,
			"1 of 1 tofu runs in progress (this machine's bound: 1 CPUs at 32 runs each, 100Mi of memory at 256Mi a run): waiting for a runner"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.m.Max(); got != c.max {
				t.Fatalf("max %d, want %d", got, c.max)
			}
			if err := c.m.Admit(context.Background(), tfrunner.Request{}, Load{Runs: c.max - 1}); err != nil {
				t.Errorf("below the bound: %v", err)
			}
			err := c.m.Admit(context.Background(), tfrunner.Request{}, Load{Runs: c.max})
			var refused *AdmissionError
			if !errors.As(err, &refused) || refused.Reason != v1alpha1.ReasonWaitingForRunner || refused.Message != c.reason {
				t.Errorf("at the bound: %v", err)
			}
		})
	}
}

// TestThisMachineReadsMemory: MemAvailable from meminfo, a cgroup's memory.max when set.
func TestThisMachineReadsMemory(t *testing.T) {
	dir := t.TempDir()
	meminfo := filepath.Join(dir, "meminfo")
	if err := os.WriteFile(meminfo, []byte("MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   12582912 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := memAvailable(meminfo); err != nil || n != 12<<30 {
		t.Errorf("MemAvailable %d, %v; want 12Gi", n, err)
	}
	if err := os.WriteFile(meminfo, []byte("MemTotal: 1 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := memAvailable(meminfo); err == nil {
		t.Error("meminfo without MemAvailable read")
	}
	limit := filepath.Join(dir, "memory.max")
	for content, want := range map[string]int64{"max\n": -1, "4294967296\n": 4 << 30} {
		if err := os.WriteFile(limit, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		n, ok := cgroupMemoryLimit(limit)
		if want < 0 && ok || want >= 0 && (!ok || n != want) {
			t.Errorf("memory.max %q: %d, %v", content, n, ok)
		}
	}
	m, err := ThisMachine()
	if err != nil || m.CPUs < 1 || m.Memory <= 0 {
		t.Errorf("this machine: %+v, %v", m, err)
	}
}
