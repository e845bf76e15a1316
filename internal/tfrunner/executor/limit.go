// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// DefaultMaxConcurrent bounds the runs in progress of an executor without a Limiter.
const DefaultMaxConcurrent = 4

// Limiter admits new runs. Every executor starts its runs through one (Start): under one lock
// it looks whether the run exists already, counts what is in progress, asks each Budget and
// takes a slot, so two Starts never both take the last slot. The run is then created outside
// the lock: creating one (a runner process, a Job) takes from tens of milliseconds to seconds
// on a busy machine or API server, and a burst's runs must not be created one after another.
// One Limiter may be shared by executors that draw on the same budgets.
//
// The zero Limiter admits DefaultMaxConcurrent runs at once.
//
// A Budget is one thing runs need that is scarce, each refusing with its own reason and the
// numbers in its message: an explicit cap (MaxRuns, FULFILLER_MAX_CONCURRENT_RUNS), the
// machine a local executor runs on (MachineRuns), the cluster's capacity for runner pods
// (ClusterRunners), and the API request budgets the families' clouds enforce (APIBudgets).
type Limiter struct {
	budgets []Budget // nil: MaxRuns(DefaultMaxConcurrent)
	mu      sync.Mutex
	// creating are the runs admitted whose creation is under way, by name. They count as in
	// progress until it ends, whether or not the executor's Load sees them yet.
	creating map[string]struct{}
}

// NewLimiter admits a run when every budget does (none: any run).
func NewLimiter(budgets ...Budget) *Limiter {
	return &Limiter{budgets: append([]Budget{}, budgets...)}
}

// Budget decides whether one more run may start now.
type Budget interface {
	// Admit returns nil when req may start given what is in progress, or an *AdmissionError
	// that says what it waits for.
	Admit(ctx context.Context, req tfrunner.Request, load Load) error
}

// Spender is a Budget that a started run takes something from: Spend is called, under the
// Limiter's lock, once every budget admitted a run, before the run is created (a run whose
// creation fails has spent too).
type Spender interface {
	Spend(req tfrunner.Request)
}

// Load is what an executor has in progress when a run asks to start.
type Load struct {
	// Runs that were started and have not ended, adopted ones included.
	Runs int
}

// AdmissionError: a run may not start now; it is retried later. Reason is the condition
// reason the waiting claim shows (ReasonWaitingForRunner, ReasonWaitingForAPIBudget),
// Message says why, with the numbers. RetryAfter, when set, is when asking again can succeed
// at the earliest. It is ErrBusy.
type AdmissionError struct {
	Reason     string
	Message    string
	RetryAfter time.Duration
}

func (e *AdmissionError) Error() string { return e.Message }

func (e *AdmissionError) Unwrap() error { return ErrBusy }

// StartSteps are an executor's parts of starting one run.
type StartSteps struct {
	// Exists reports whether a run of the request's name exists already (started before, or
	// by another executor on the same store); its error, such as ErrOtherClaimsRun, is Start's.
	Exists func(ctx context.Context) (bool, error)
	// InProgress names the runs the executor has in progress. The Limiter counts them, with
	// the runs it is creating that are not among them yet, as the Load its budgets see.
	InProgress func(ctx context.Context) (map[string]bool, error)
	// Create starts the run.
	Create func(ctx context.Context) error
}

// Start starts the run req unless it exists: an existing run is not started again (Start is
// idempotent), a new one only once every budget admits it. A refused run returns an
// *AdmissionError (ErrBusy).
func (l *Limiter) Start(ctx context.Context, req tfrunner.Request, steps StartSteps) error {
	if admitted, err := l.admit(ctx, req, steps); !admitted || err != nil {
		return err
	}
	err := steps.Create(ctx)
	l.mu.Lock()
	delete(l.creating, req.Name)
	l.mu.Unlock()
	return err
}

// admit decides, under the lock, whether req is a new run every budget admits, and if so
// spends its budgets and counts it as being created.
func (l *Limiter) admit(ctx context.Context, req tfrunner.Request, steps StartSteps) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.creating[req.Name]; ok {
		return false, nil // another Start is creating this run
	}
	if exists, err := steps.Exists(ctx); exists || err != nil {
		return false, err
	}
	running, err := steps.InProgress(ctx)
	if err != nil {
		return false, err
	}
	load := Load{Runs: len(running)}
	for name := range l.creating {
		if !running[name] {
			load.Runs++
		}
	}
	budgets := l.budgets
	if budgets == nil {
		budgets = []Budget{MaxRuns(DefaultMaxConcurrent)}
	}
	for _, b := range budgets {
		if err := b.Admit(ctx, req, load); err != nil {
			return false, fmt.Errorf("starting run %s: %w", req.Name, err)
		}
	}
	for _, b := range budgets {
		if s, ok := b.(Spender); ok {
			s.Spend(req)
		}
	}
	if l.creating == nil {
		l.creating = map[string]struct{}{}
	}
	l.creating[req.Name] = struct{}{}
	return true, nil
}

// waitingForRunner refuses a run because n runs are in progress of a bound of n; why says
// where the bound comes from.
func waitingForRunner(runs, bound int, why string) error {
	return &AdmissionError{Reason: v1alpha1.ReasonWaitingForRunner,
		Message: fmt.Sprintf("%d of %d tofu runs in progress (%s): waiting for a runner", runs, bound, why)}
}

// MaxRuns is an explicit cap on the runs in progress at once (FULFILLER_MAX_CONCURRENT_RUNS).
type MaxRuns int

// Admit implements Budget.
func (m MaxRuns) Admit(_ context.Context, _ tfrunner.Request, load Load) error {
	if load.Runs < int(m) {
		return nil
	}
	return waitingForRunner(load.Runs, int(m), "FULFILLER_MAX_CONCURRENT_RUNS")
}

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

// RunnerPlacement is what a runner pod asks of a node: its requests, and where it may run
// (never on a node Karpenter manages: runnerAffinity).
type RunnerPlacement struct {
	Requests     corev1.ResourceList
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Namespace is where runner pods run.
	Namespace string
}

// RunnerCapacity is how many runner pods the cluster holds: Slots on Nodes nodes.
type RunnerCapacity struct {
	Slots, Nodes int
}

// RunnerSlots counts how many runner pods fit on the nodes they may run on: Ready,
// schedulable nodes that Karpenter does not manage, that match the runners' node selector and
// whose NoSchedule and NoExecute taints they tolerate. On each, it divides what the node's
// allocatable leaves after the requests of the pods on it that are not runners by a runner's
// requests (and counts the pods it may hold), so the slots include those runners in progress
// take.
func RunnerSlots(nodes []*corev1.Node, pods []*corev1.Pod, p RunnerPlacement) RunnerCapacity {
	used := map[string]corev1.ResourceList{}
	count := map[string]int64{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || isRunner(pod, p.Namespace) {
			continue
		}
		count[pod.Spec.NodeName]++
		sum := used[pod.Spec.NodeName]
		if sum == nil {
			sum = corev1.ResourceList{}
			used[pod.Spec.NodeName] = sum
		}
		for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
	}
	var c RunnerCapacity
	for _, node := range nodes {
		if !mayRunRunners(node, p) {
			continue
		}
		c.Nodes++
		fit := int64(math.MaxInt32)
		if pods, ok := node.Status.Allocatable[corev1.ResourcePods]; ok {
			fit = max(0, pods.Value()-count[node.Name])
		}
		for name, want := range p.Requests {
			if want.IsZero() {
				continue
			}
			have, ok := node.Status.Allocatable[name]
			if !ok {
				fit = 0
				break
			}
			if u, ok := used[node.Name][name]; ok {
				have.Sub(u)
			}
			fit = min(fit, max(0, have.MilliValue()/want.MilliValue()))
		}
		c.Slots += int(fit)
	}
	return c
}

// isRunner tells a runner pod: it is managed by the fulfiller, in the runners' namespace, and
// made by a Job.
func isRunner(pod *corev1.Pod, namespace string) bool {
	return pod.Namespace == namespace && pod.Labels[tfrunner.LabelManagedBy] == tfrunner.ManagedBy && pod.Labels[jobNameLabel] != ""
}

// mayRunRunners: the node is Ready and schedulable, not Karpenter's, matches the runners'
// node selector, and they tolerate its taints that keep pods off.
func mayRunRunners(node *corev1.Node, p RunnerPlacement) bool {
	if node.Spec.Unschedulable || node.DeletionTimestamp != nil {
		return false
	}
	if _, managed := node.Labels["karpenter.sh/nodepool"]; managed {
		return false
	}
	if !labels.SelectorFromSet(p.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false
	}
	for i := range node.Spec.Taints {
		taint := &node.Spec.Taints[i]
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for j := range p.Tolerations {
			if p.Tolerations[j].ToleratesTaint(klog.Background(), taint, true) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return false
		}
	}
	return true
}

// ClusterRunners bounds the runs of a Job executor by the cluster's capacity for runner
// pods (RunnerSlots), counted anew at every admission, so it follows the nodes as they come,
// go and fill.
type ClusterRunners struct {
	Placement RunnerPlacement
	// Observe lists the cluster's nodes and pods. It is called at every admission: it should
	// read an informer's cache.
	Observe func(ctx context.Context) ([]*corev1.Node, []*corev1.Pod, error)
}

// Admit implements Budget.
func (c *ClusterRunners) Admit(ctx context.Context, _ tfrunner.Request, load Load) error {
	nodes, pods, err := c.Observe(ctx)
	if err != nil {
		return fmt.Errorf("counting the cluster's runner capacity: %w", err)
	}
	capacity := RunnerSlots(nodes, pods, c.Placement)
	if load.Runs < capacity.Slots {
		return nil
	}
	return waitingForRunner(load.Runs, capacity.Slots, fmt.Sprintf("the cluster's capacity for runner pods of %s: %d nodes may run them",
		describeRequests(c.Placement.Requests), capacity.Nodes))
}

func describeRequests(r corev1.ResourceList) string {
	var parts []string
	if q, ok := r[corev1.ResourceCPU]; ok {
		parts = append(parts, q.String()+" CPU")
	}
	if q, ok := r[corev1.ResourceMemory]; ok {
		parts = append(parts, q.String()+" memory")
	}
	return strings.Join(parts, ", ")
}

// formatBytes shows a memory size in GiB, or MiB below one.
func formatBytes(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1fGi", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%dMi", n>>20)
}

// APIDemand is what one run takes from one API request budget its cloud enforces.
type APIDemand struct {
	// Budget names the budget, as a person reads it and without any secret; runs whose
	// demands name the same budget share it (e.g. one Hetzner Cloud project's).
	Budget string
	// Limit requests per Per is what the cloud allows; it refills evenly.
	Limit int
	Per   time.Duration
	// Requests is an estimate of the requests one run makes against it.
	Requests int
}

// APIBudgets keeps, per budget a family's cloud enforces, the requests left for runs: it
// starts full, refills at the cloud's rate, admits a run while every budget it draws on holds
// the requests it is estimated to make, and takes them when it starts. It counts only the
// fulfiller's runs: other clients of the same credentials (a cloud controller manager, a CSI
// driver) spend the cloud's budget unseen, and the runs' own retries on a rate-limit error
// are the cloud's last word.
type APIBudgets struct {
	Clock clock.PassiveClock
	// Demands says what a run takes from which budgets (none: it is not limited).
	Demands func(tfrunner.Request) []APIDemand

	mu   sync.Mutex
	left map[string]*apiBucket
}

type apiBucket struct {
	left float64
	at   time.Time
}

// NewAPIBudgets returns budgets with the demands of runs.
func NewAPIBudgets(c clock.PassiveClock, demands func(tfrunner.Request) []APIDemand) *APIBudgets {
	return &APIBudgets{Clock: c, Demands: demands}
}

// bucket returns d's budget refilled until now.
func (a *APIBudgets) bucket(d APIDemand, now time.Time) *apiBucket {
	if a.left == nil {
		a.left = map[string]*apiBucket{}
	}
	b, ok := a.left[d.Budget]
	if !ok {
		b = &apiBucket{left: float64(d.Limit), at: now}
		a.left[d.Budget] = b
	}
	if now.After(b.at) {
		b.left = min(float64(d.Limit), b.left+now.Sub(b.at).Seconds()*d.rate())
		b.at = now
	}
	return b
}

// rate is the requests the budget regains per second.
func (d APIDemand) rate() float64 { return float64(d.Limit) / d.Per.Seconds() }

// need is what a run must find left: its estimate, but never more than the whole budget.
func (d APIDemand) need() float64 { return float64(min(d.Requests, d.Limit)) }

func (a *APIBudgets) demands(req tfrunner.Request) []APIDemand {
	if a.Demands == nil {
		return nil
	}
	var out []APIDemand
	for _, d := range a.Demands(req) {
		if d.Limit > 0 && d.Per > 0 && d.Requests > 0 {
			out = append(out, d)
		}
	}
	return out
}

// Admit implements Budget.
func (a *APIBudgets) Admit(_ context.Context, req tfrunner.Request, _ Load) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.Clock.Now()
	for _, d := range a.demands(req) {
		b := a.bucket(d, now)
		if b.left >= d.need() {
			continue
		}
		wait := time.Duration((d.need() - b.left) / d.rate() * float64(time.Second)).Round(time.Second)
		return &AdmissionError{Reason: v1alpha1.ReasonWaitingForAPIBudget, RetryAfter: wait,
			Message: fmt.Sprintf("%s allows %d API requests per %s; %d are left for runs, and one %s makes about %d: enough again in %s",
				d.Budget, d.Limit, per(d.Per), int(b.left), req.Operation, d.Requests, wait)}
	}
	return nil
}

// Spend implements Spender.
func (a *APIBudgets) Spend(req tfrunner.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.Clock.Now()
	for _, d := range a.demands(req) {
		b := a.bucket(d, now)
		b.left = max(0, b.left-d.need())
	}
}

func per(d time.Duration) string {
	switch d {
	case time.Hour:
		return "hour"
	case time.Minute:
		return "minute"
	case time.Second:
		return "second"
	}
	return d.String()
}
