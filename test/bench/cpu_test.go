// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// Where a burst's CPU goes, by role: the control plane's components, the controller (the
// fulfiller's, or karpenter-kwok), the runs (the controller's reaped children: runners, tofu,
// providers, provisioners, and those still running), the machines (simulated machines, or the
// kwok controller that stands in for every node) and this process (the watches, the Hetzner
// Cloud stand-in). Read from /proc at the burst's start and end; the difference is the
// burst's.
const (
	roleAPIServer  = "apiserver"
	roleEtcd       = "etcd"
	roleScheduler  = "scheduler"
	roleKCM        = "controller-manager"
	roleController = "controller"
	roleRuns       = "runs"
	roleMachines   = "machines"
	roleBench      = "bench"
	roleOther      = "other"
)

var roleOrder = []string{roleAPIServer, roleEtcd, roleScheduler, roleKCM, roleController, roleRuns, roleMachines, roleBench, roleOther}

// procTimes is one process's CPU time (utime+stime) and that of its reaped children
// (cutime+cstime).
type procTimes struct {
	ppid         int
	comm         string
	args         []string
	self, reaped time.Duration
}

// clockTick is the kernel's USER_HZ: /proc's CPU times are in its ticks (100 on Linux).
const clockTick = 10 * time.Millisecond

func readProc(pid int) (procTimes, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, false
	}
	// comm is in parentheses and may hold spaces: the fields start after the last ')'.
	open, end := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
	if open < 0 || end < open {
		return procTimes{}, false
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 15 {
		return procTimes{}, false
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(fields[i], 10, 64); return v }
	// After comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	p := procTimes{ppid: int(n(1)), comm: string(stat[open+1 : end]),
		self: time.Duration(n(11)+n(12)) * clockTick, reaped: time.Duration(n(13)+n(14)) * clockTick}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		p.args = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	}
	return p, true
}

// cpuSnapshot is every process of one environment: those whose command line names its
// directory, this process's children, and their descendants.
type cpuSnapshot map[int]procTimes

func snapshotCPU(dir string) cpuSnapshot {
	all := map[int]procTimes{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if p, ok := readProc(pid); ok {
				all[pid] = p
			}
		}
	}
	self := os.Getpid()
	in := map[int]bool{self: true}
	var member func(pid int, depth int) bool
	member = func(pid int, depth int) bool {
		if ok, seen := in[pid]; seen {
			return ok
		}
		p, ok := all[pid]
		if !ok || depth > 64 {
			return false
		}
		ok = strings.Contains(strings.Join(p.args, " "), dir) || member(p.ppid, depth+1)
		in[pid] = ok
		return ok
	}
	snap := cpuSnapshot{}
	for pid, p := range all {
		if member(pid, 0) {
			snap[pid] = p
		}
	}
	return snap
}

// fulfiller reports whether the process is the development binary running command
// (controller, sim).
func (p procTimes) fulfiller(command string) bool {
	return len(p.args) > 1 && strings.HasPrefix(filepath.Base(p.args[0]), "fulfiller") && p.args[1] == command
}

// ownRoles are the processes known by their program.
var ownRoles = map[string]string{
	"kube-apiserver": roleAPIServer, "etcd": roleEtcd, "kube-scheduler": roleScheduler,
	"kube-controller-manager": roleKCM, "karpenter-kwok": roleController, "kwok": roleMachines,
	"fulfiller-sim": roleMachines,
}

// ownRole is what a process is by itself, "" when its program does not say.
func (s cpuSnapshot) ownRole(pid int) string {
	p := s[pid]
	switch {
	case pid == os.Getpid():
		return roleBench
	case p.fulfiller("controller"):
		return roleController
	case p.fulfiller("sim"):
		return roleMachines
	case len(p.args) > 0:
		return ownRoles[filepath.Base(p.args[0])]
	}
	return ""
}

// role is what a process of the environment is: its own role, or that of the nearest
// ancestor that is the fulfiller's controller (the process is a run) or a machine.
func (s cpuSnapshot) role(pid int) string {
	if r := s.ownRole(pid); r != "" {
		return r
	}
	for up, depth := s[pid].ppid, 0; depth < 64; up, depth = s[up].ppid, depth+1 {
		q, ok := s[up]
		switch {
		case !ok:
			return roleOther
		case q.fulfiller("controller"):
			return roleRuns
		case s.ownRole(up) == roleMachines:
			return roleMachines
		}
	}
	return roleOther
}

// cpuUse is the CPU time each role took between two snapshots, and the wall-clock time
// between them.
type cpuUse struct {
	byRole map[string]time.Duration
	wall   time.Duration
}

func cpuBetween(before, after cpuSnapshot, wall time.Duration) cpuUse {
	use := cpuUse{byRole: map[string]time.Duration{}, wall: wall}
	for pid, p := range after {
		was, existed := before[pid]
		if existed && was.comm != p.comm && was.self > p.self {
			existed = false // the pid was reused
		}
		self, reaped := p.self, p.reaped
		if existed {
			self, reaped = p.self-was.self, p.reaped-was.reaped
		}
		role := after.role(pid)
		use.byRole[role] += self
		// The controller's reaped children are its runs; anyone else's belong to its role.
		if p.fulfiller("controller") {
			use.byRole[roleRuns] += reaped
		} else if pid != os.Getpid() {
			use.byRole[role] += reaped
		}
	}
	return use
}

func (u cpuUse) total() time.Duration {
	var t time.Duration
	for _, d := range u.byRole {
		t += d
	}
	return t
}

func (u cpuUse) String() string {
	if len(u.byRole) == 0 {
		return "–"
	}
	var parts []string
	for _, r := range roleOrder {
		if d := u.byRole[r]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f s", r, d.Seconds()))
		}
	}
	return fmt.Sprintf("%s (%.1f CPU-s in %.1f s: %.2f CPUs busy)", strings.Join(parts, ", "),
		u.total().Seconds(), u.wall.Seconds(), u.total().Seconds()/max(u.wall.Seconds(), 0.001))
}

// mergeCPU is the median over rounds of each role's CPU time.
func mergeCPU(us []cpuUse) cpuUse {
	out := cpuUse{byRole: map[string]time.Duration{}}
	var walls []time.Duration
	for _, r := range roleOrder {
		var ds []time.Duration
		for _, u := range us {
			ds = append(ds, u.byRole[r])
		}
		if m := median(ds); m > 0 {
			out.byRole[r] = m
		}
	}
	for _, u := range us {
		walls = append(walls, u.wall)
	}
	out.wall = median(walls)
	return out
}

// apiLatency is what the API server says of its requests during a burst: the mean latency of
// creating the named resources (apiserver_request_duration_seconds, POST), and the mean time
// requests waited in API Priority and Fairness queues per priority level
// (apiserver_flowcontrol_request_wait_duration_seconds), from its /metrics at the burst's end.
type apiLatency struct {
	create map[string]time.Duration // resource → mean POST latency
	wait   map[string]time.Duration // priority level → mean queue wait (executed requests)
	counts map[string]float64
}

func readAPILatency(ctx context.Context, cfg *rest.Config, resources ...string) (apiLatency, error) {
	body, err := apiServerMetrics(ctx, cfg)
	if err != nil {
		return apiLatency{}, err
	}
	sums, counts := map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		for _, m := range []struct{ name, key string }{
			{"apiserver_request_duration_seconds", "resource"},
			{"apiserver_flowcontrol_request_wait_duration_seconds", "priority_level"},
		} {
			rest, ok := strings.CutPrefix(line, m.name)
			if !ok {
				continue
			}
			suffix, labels, _ := strings.Cut(rest, "{")
			labels, value, _ := strings.Cut(labels, "} ")
			if m.key == "resource" && !strings.Contains(labels, `verb="POST"`) {
				continue
			}
			if m.key == "priority_level" && !strings.Contains(labels, `execute="true"`) {
				continue
			}
			key := m.key + "=" + labelValue(labels, m.key)
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				continue
			}
			switch suffix {
			case "_sum":
				sums[key] += v
			case "_count":
				counts[key] += v
			}
		}
	}
	out := apiLatency{create: map[string]time.Duration{}, wait: map[string]time.Duration{}, counts: counts}
	for key, n := range counts {
		if n == 0 {
			continue
		}
		mean := time.Duration(sums[key] / n * float64(time.Second))
		if r, ok := strings.CutPrefix(key, "resource="); ok && slicesContains(resources, r) {
			out.create[r] = mean
		} else if p, ok := strings.CutPrefix(key, "priority_level="); ok {
			out.wait[p] = mean
		}
	}
	return out, nil
}

func labelValue(labels, key string) string {
	_, rest, ok := strings.Cut(labels, key+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func (a apiLatency) String() string {
	var parts []string
	for _, r := range sortedKeys(a.create) {
		parts = append(parts, fmt.Sprintf("POST %s %s (%d)", r, round(a.create[r]), int(a.counts["resource="+r])))
	}
	for _, p := range sortedKeys(a.wait) {
		if a.wait[p] >= time.Millisecond {
			parts = append(parts, fmt.Sprintf("APF wait %s %s (%d)", p, round(a.wait[p]), int(a.counts["priority_level="+p])))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return "means: " + strings.Join(parts, ", ")
}

func sortedKeys(m map[string]time.Duration) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestCPURoles: each process of a burst's environment is counted under its role, a run's
// processes (alive, or reaped by the controller) under runs.
func TestCPURoles(t *testing.T) {
	self := os.Getpid()
	before := cpuSnapshot{
		10: {ppid: 1, comm: "fulfiller-dev", args: []string{"/b/fulfiller-dev", "dev", "serve"}},
		11: {ppid: 10, comm: "kube-apiserver", args: []string{"/t/kube-apiserver"}, self: time.Second},
		12: {ppid: 10, comm: "fulfiller-dev", args: []string{"/b/fulfiller-dev", "controller"}, self: time.Second, reaped: time.Second},
	}
	after := cpuSnapshot{
		self: {ppid: 1, comm: "bench.test", args: []string{"/tmp/bench.test"}, self: 3 * time.Second, reaped: time.Second},
		10:   before[10],
		11:   {ppid: 10, comm: "kube-apiserver", args: []string{"/t/kube-apiserver"}, self: 4 * time.Second},
		12:   {ppid: 10, comm: "fulfiller-dev", args: []string{"/b/fulfiller-dev", "controller"}, self: 3 * time.Second, reaped: 6 * time.Second},
		20:   {ppid: 12, comm: "fulfiller-dev", args: []string{"/b/fulfiller-dev", "run", "--request", "r"}, self: 100 * time.Millisecond},
		21:   {ppid: 20, comm: "tofu", args: []string{"/t/tofu", "apply"}, self: 200 * time.Millisecond, reaped: 300 * time.Millisecond},
		30:   {ppid: 1, comm: "fulfiller-dev", args: []string{"/b/fulfiller-dev", "sim", "run"}, self: 500 * time.Millisecond},
		31:   {ppid: 30, comm: "sh", args: []string{"sh"}, self: 100 * time.Millisecond},
		32:   {ppid: 1, comm: "fulfiller-sim", args: []string{"/b/fulfiller-sim", "start", "--in-place"}, self: 200 * time.Millisecond},
		40:   {ppid: self, comm: "karpenter-kwok", args: []string{"/t/karpenter-kwok"}, self: time.Second, reaped: time.Second},
		41:   {ppid: 40, comm: "sh", args: []string{"sh"}, self: 100 * time.Millisecond},
	}
	got := cpuBetween(before, after, 10*time.Second).byRole
	want := map[string]time.Duration{
		roleAPIServer:  3 * time.Second,
		roleController: 2*time.Second + 2*time.Second, // the fulfiller's and karpenter-kwok's (with its reaped children)
		roleRuns:       5*time.Second + 600*time.Millisecond,
		roleMachines:   800 * time.Millisecond,
		roleBench:      3 * time.Second,
		roleOther:      100 * time.Millisecond,
	}
	for _, r := range roleOrder {
		if got[r] != want[r] {
			t.Errorf("%s: %s, want %s", r, got[r], want[r])
		}
	}
}
