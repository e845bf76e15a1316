// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// What one run takes of the machine the local executor runs on.
//
// CPU: a run's CPU comes in short bursts (process starts, init, the apply's plan and state
// writes) and the rest of its time it waits for its cloud, so a run uses a small share of a
// CPU. Local runs are niced (LocalRunNice), so more runs than CPUs can do at once slow the
// runs, not the controller. A fixed 10 runs per CPU (the runner Job's 100m request) kept a
// 50-server burst in three waves of a server create each.
//
// Memory is the runner Job's default request: the runner's, tofu's and a provider plugin's
// at once. The measurements behind both are in docs/benchmarks.md, "What one run takes".
const (
	RunsPerCPU = 32
	RunMemory  = 256 << 20
)

// MachineRuns bounds the runs of a local executor by the machine they run on: RunsPerCPU
// for each CPU the controller may use, and one run per RunMemory of the memory it may use.
type MachineRuns struct {
	CPUs   int
	Memory int64 // bytes
}

// Max is the machine's bound (at least 1).
func (m MachineRuns) Max() int {
	return max(1, min(m.CPUs*RunsPerCPU, int(m.Memory/RunMemory)))
}

// Admit implements Budget.
func (m MachineRuns) Admit(_ context.Context, _ tfrunner.Request, load Load) error {
	if n := m.Max(); load.Runs >= n {
		return waitingForRunner(load.Runs, n, m.String())
	}
	return nil
}

func (m MachineRuns) String() string {
	return fmt.Sprintf("this machine's bound: %d CPUs at %d runs each, %s of memory at %s a run",
		m.CPUs, RunsPerCPU, formatBytes(m.Memory), formatBytes(RunMemory))
}

// ThisMachine is what the controller's process may use: the CPUs of GOMAXPROCS (since Go
// 1.25 the cgroup's CPU limit, when it has one) and the memory available now (MemAvailable),
// or the cgroup's memory limit when that is lower.
func ThisMachine() (MachineRuns, error) {
	m := MachineRuns{CPUs: runtime.GOMAXPROCS(0)}
	available, err := memAvailable("/proc/meminfo")
	if err != nil {
		return m, fmt.Errorf("reading the machine's memory: %w", err)
	}
	m.Memory = available
	if limit, ok := cgroupMemoryLimit("/sys/fs/cgroup/memory.max"); ok && limit < m.Memory {
		m.Memory = limit
	}
	return m, nil
}

func memAvailable(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 3 && fields[0] == "MemAvailable:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing %s: %w", path, err)
			}
			return kb << 10, nil
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no MemAvailable", path)
}

// cgroupMemoryLimit reads a cgroup v2 memory.max ("max": none).
func cgroupMemoryLimit(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil
}
