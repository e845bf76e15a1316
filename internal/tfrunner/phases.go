// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Phase is the wall-clock and CPU time of one step of a run: PhaseStart, PhaseCache,
// PhaseModule, PhaseVersion, PhaseInit, PhaseWorkspace, the operation, PhaseOutput.
type Phase struct {
	Name string `json:"name"`
	// Wall is the step's elapsed time. For PhaseStart it is the runner process's age when the
	// run began (10 ms resolution; 0 when /proc cannot tell).
	Wall time.Duration `json:"wall"`
	// CPU is the user and system time the step cost: the runner's own and that of the
	// processes it waited for (tofu, and what tofu waited for: provisioners).
	CPU time.Duration `json:"cpu"`
}

// Names of the phases of a run; the operation's phase is named after the operation.
const (
	// PhaseStart is the runner process up to the run: starting the binary, Go's and the
	// packages' initialisation, reading the request.
	PhaseStart = "start"
	// PhaseCache makes the module cache's entry of a module (the first run of a module
	// version only): a copy and `tofu init -backend=false`.
	PhaseCache = "cache"
	// PhaseModule prepares the working directory: the module (copied, or linked from the
	// module cache), the backend file and the variables file.
	PhaseModule = "module"
	// PhaseVersion is terraform-exec asking tofu for its version (`tofu version -json`).
	PhaseVersion = "version"
	// PhaseInit is `tofu init`, or, for a run of a cached module, writing its backend record.
	PhaseInit      = "init"
	PhaseWorkspace = "workspace"
	// PhaseOutput reads the outputs with `tofu output -json`, which only runs when the
	// apply's stream lacks them (sensitive ones).
	PhaseOutput = "output"
)

// phaseClock records the phases of a run as they end.
type phaseClock struct {
	mark    time.Time
	markCPU time.Duration
	phases  []Phase
}

// startPhases begins timing at the start of a run and records PhaseStart.
func startPhases() *phaseClock {
	c := &phaseClock{mark: time.Now(), markCPU: processCPU()}
	c.phases = append(c.phases, Phase{Name: PhaseStart, Wall: processAge(), CPU: c.markCPU})
	return c
}

// end records the phase that began at the previous mark.
func (c *phaseClock) end(name string) {
	now, cpu := time.Now(), processCPU()
	c.phases = append(c.phases, Phase{Name: name, Wall: now.Sub(c.mark), CPU: cpu - c.markCPU})
	c.mark, c.markCPU = now, cpu
}

// String is one line for the run log: "start 40ms (cpu 60ms), module 2ms (cpu 1ms), ...".
func (c *phaseClock) String() string {
	parts := make([]string, 0, len(c.phases))
	for _, p := range c.phases {
		parts = append(parts, fmt.Sprintf("%s %s (cpu %s)", p.Name, p.Wall.Round(time.Millisecond), p.CPU.Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// processCPU is the user and system time of this process and of its waited-for children.
func processCPU() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// clockTicks is Linux's USER_HZ, the unit of /proc's process times.
const clockTicks = 100

// processAge is how long this process has existed, from its start time in /proc/self/stat
// and the system's uptime; 0 when they cannot be read.
func processAge() time.Duration {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	uptime, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: fields are counted after it.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	const startTimeField = 22 - 3 // fields 1 and 2 are the pid and the name
	if len(fields) <= startTimeField {
		return 0
	}
	started, err := strconv.ParseFloat(fields[startTimeField], 64)
	if err != nil {
		return 0
	}
	upFields := strings.Fields(string(uptime))
	if len(upFields) == 0 {
		return 0
	}
	up, err := strconv.ParseFloat(upFields[0], 64)
	if err != nil {
		return 0
	}
	age := time.Duration((up - started/clockTicks) * float64(time.Second))
	return max(age, 0)
}
