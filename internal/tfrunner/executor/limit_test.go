// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// memStore is a store of runs for the limiter: names started, and how many are in progress.
type memStore struct {
	mu      sync.Mutex
	started map[string]bool
}

func (m *memStore) steps(name string) StartSteps {
	return StartSteps{
		Exists: func(context.Context) (bool, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.started[name], nil
		},
		InProgress: func(context.Context) (map[string]bool, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return maps.Clone(m.started), nil
		},
		Create: func(context.Context) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.started[name] = true
			return nil
		},
	}
}

// budgetFunc is a Budget of a function.
type budgetFunc func(tfrunner.Request, Load) error

func (f budgetFunc) Admit(_ context.Context, req tfrunner.Request, load Load) error {
	return f(req, load)
}

// TestLimiterAdmitsUpToItsBudgets: concurrent Starts never take more slots than there are; a
// run that exists is never refused; a refusal names what the run waits for, and a further
// budget refuses with its own reason.
func TestLimiterAdmitsUpToItsBudgets(t *testing.T) {
	ctx := context.Background()
	store := &memStore{started: map[string]bool{}}
	l := NewLimiter(MaxRuns(3))
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			name := fmt.Sprintf("claim-%d-apply-1", i)
			errs[i] = l.Start(ctx, tfrunner.Request{Name: name}, store.steps(name))
		})
	}
	wg.Wait()
	admitted := 0
	for _, err := range errs {
		var refused *AdmissionError
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &refused) && errors.Is(err, ErrBusy) && refused.Reason == v1alpha1.ReasonWaitingForRunner &&
			refused.Message == "3 of 3 tofu runs in progress (FULFILLER_MAX_CONCURRENT_RUNS): waiting for a runner":
		default:
			t.Errorf("refusal %v", err)
		}
	}
	if admitted != 3 || len(store.started) != 3 {
		t.Fatalf("admitted %d, started %d; want 3", admitted, len(store.started))
	}
	for name := range store.started {
		if err := l.Start(ctx, tfrunner.Request{Name: name}, store.steps(name)); err != nil {
			t.Errorf("starting the existing run %s again while full: %v", name, err)
		}
	}

	apiBudget := budgetFunc(func(req tfrunner.Request, _ Load) error {
		if req.Operation == tfrunner.Destroy {
			return nil
		}
		return &AdmissionError{Reason: "WaitingForAPIBudget", Message: "the family's API budget is used up"}
	})
	l = NewLimiter(MaxRuns(10), apiBudget)
	err := l.Start(ctx, tfrunner.Request{Name: "claim-x-apply-1", Operation: tfrunner.Apply}, store.steps("claim-x-apply-1"))
	var refused *AdmissionError
	if !errors.As(err, &refused) || refused.Reason != "WaitingForAPIBudget" {
		t.Errorf("start past the API budget: %v", err)
	}
	if err := l.Start(ctx, tfrunner.Request{Name: "claim-x-destroy-1", Operation: tfrunner.Destroy}, store.steps("claim-x-destroy-1")); err != nil {
		t.Errorf("a destroy the API budget admits: %v", err)
	}

	var zero Limiter
	for i := range DefaultMaxConcurrent + 1 {
		name := fmt.Sprintf("zero-%d-apply-1", i)
		err := zero.Start(ctx, tfrunner.Request{Name: name}, (&memStore{started: map[string]bool{}}).steps(name))
		if err != nil {
			t.Errorf("zero limiter: %v", err)
		}
	}
	full := &memStore{started: map[string]bool{}}
	for i := range DefaultMaxConcurrent {
		full.started[fmt.Sprint(i)] = true
	}
	if err := zero.Start(ctx, tfrunner.Request{Name: "one-more"}, full.steps("one-more")); !errors.Is(err, ErrBusy) {
		t.Errorf("zero limiter past DefaultMaxConcurrent: %v", err)
	}
}

// spendCount is a Spender that counts what it was spent.
type spendCount struct {
	mu    sync.Mutex
	spent int
}

func (c *spendCount) Admit(context.Context, tfrunner.Request, Load) error { return nil }

func (c *spendCount) Spend(tfrunner.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spent++
}

// TestLimiterCreatesOutsideItsLock: runs are created at the same time, not one after another
// (a Create waits here until two are under way), yet a run being created holds its slot
// before the store shows it, is not created twice, and has spent its budgets; a failed
// creation frees its slot.
func TestLimiterCreatesOutsideItsLock(t *testing.T) {
	ctx := context.Background()
	store := &memStore{started: map[string]bool{}}
	spent := &spendCount{}
	l := NewLimiter(MaxRuns(2), spent)
	underWay := make(chan string, 2)
	release := make(chan struct{})
	creates := map[string]int{}
	var mu sync.Mutex
	slow := func(name string, fail bool) StartSteps {
		steps := store.steps(name)
		create := steps.Create
		steps.Create = func(ctx context.Context) error {
			mu.Lock()
			creates[name]++
			mu.Unlock()
			underWay <- name
			<-release
			if fail {
				return errors.New("no such binary")
			}
			return create(ctx)
		}
		return steps
	}
	errs := make(chan error, 2)
	go func() { errs <- l.Start(ctx, tfrunner.Request{Name: "a-apply-1"}, slow("a-apply-1", false)) }()
	go func() { errs <- l.Start(ctx, tfrunner.Request{Name: "b-apply-1"}, slow("b-apply-1", true)) }()
	for range 2 {
		select {
		case <-underWay:
		case <-time.After(10 * time.Second):
			t.Fatal("the second run was not created while the first one was")
		}
	}
	// Both slots are taken by runs the store does not show yet.
	if err := l.Start(ctx, tfrunner.Request{Name: "c-apply-1"}, store.steps("c-apply-1")); !errors.Is(err, ErrBusy) ||
		err.Error() != "starting run c-apply-1: 2 of 2 tofu runs in progress (FULFILLER_MAX_CONCURRENT_RUNS): waiting for a runner" {
		t.Errorf("a third run while two are being created: %v", err)
	}
	if err := l.Start(ctx, tfrunner.Request{Name: "a-apply-1"}, slow("a-apply-1", false)); err != nil {
		t.Errorf("starting a run that is being created: %v", err)
	}
	if spent.spent != 2 {
		t.Errorf("the budgets were spent %d times for the two runs being created, want 2", spent.spent)
	}
	close(release)
	var failed int
	for range 2 {
		if err := <-errs; err != nil {
			failed++
		}
	}
	if failed != 1 || creates["a-apply-1"] != 1 || creates["b-apply-1"] != 1 {
		t.Errorf("%d failed, creates %v; want 1 failed, each created once", failed, creates)
	}
	// The failed creation gave its slot back.
	if err := l.Start(ctx, tfrunner.Request{Name: "c-apply-1"}, store.steps("c-apply-1")); err != nil {
		t.Errorf("a run after a failed creation: %v", err)
	}
}

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

func node(name string, cpu, memory string, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func pod(namespace, name, nodeName, cpu, memory string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: lbls},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestRunnerSlots: runner pods fit on the nodes they may run on, in what other pods leave.
func TestRunnerSlots(t *testing.T) {
	runner := RunnerPlacement{Namespace: "fulfiller", Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}
	runnerLabels := map[string]string{tfrunner.LabelManagedBy: tfrunner.ManagedBy, jobNameLabel: "sim-a-apply-1"}
	tainted := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	}
	for _, c := range []struct {
		name      string
		nodes     []*corev1.Node
		pods      []*corev1.Pod
		placement func(*RunnerPlacement)
		want      RunnerCapacity
	}{
		{"memory is scarcer than CPU", []*corev1.Node{node("a", "4", "2Gi")}, nil, nil, RunnerCapacity{Slots: 8, Nodes: 1}},
		{"CPU is scarcer than memory", []*corev1.Node{node("a", "1", "16Gi")}, nil, nil, RunnerCapacity{Slots: 10, Nodes: 1}},
		{"other pods' requests are taken off, runners' are not", []*corev1.Node{node("a", "2", "4Gi"), node("b", "2", "4Gi")}, []*corev1.Pod{
			pod("kube-system", "dns", "a", "500m", "1Gi", nil),
			pod("fulfiller", "sim-a-apply-1-x", "a", "100m", "256Mi", runnerLabels),
			pod("other", "lookalike", "b", "1", "0", runnerLabels), // not in the runners' namespace
			pod("kube-system", "pending", "", "2", "4Gi", nil),
			func() *corev1.Pod {
				p := pod("default", "done", "b", "2", "4Gi", nil)
				p.Status.Phase = corev1.PodSucceeded
				return p
			}(),
		}, nil, RunnerCapacity{Slots: 12 + 10, Nodes: 2}},
		{"a full node holds none", []*corev1.Node{node("a", "1", "4Gi")}, []*corev1.Pod{pod("default", "big", "a", "1", "0", nil)}, nil, RunnerCapacity{Slots: 0, Nodes: 1}},
		{"pods allocatable bounds", []*corev1.Node{node("a", "8", "16Gi", func(n *corev1.Node) { n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("3") })},
			[]*corev1.Pod{pod("default", "p", "a", "0", "0", nil)}, nil, RunnerCapacity{Slots: 2, Nodes: 1}},
		{"Karpenter's, unready, cordoned and deleted nodes run none", []*corev1.Node{
			node("karpenter", "8", "16Gi", func(n *corev1.Node) { n.Labels["karpenter.sh/nodepool"] = "general" }),
			node("unready", "8", "16Gi", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }),
			node("cordoned", "8", "16Gi", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
			node("deleted", "8", "16Gi", func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{} }),
		}, nil, nil, RunnerCapacity{}},
		{"taints keep runners off unless tolerated", []*corev1.Node{node("cp", "2", "8Gi", tainted), node("soft", "1", "8Gi", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}}
		})}, nil, nil, RunnerCapacity{Slots: 10, Nodes: 1}},
		{"tolerated taint", []*corev1.Node{node("cp", "2", "8Gi", tainted)}, nil, func(p *RunnerPlacement) {
			p.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}}
		}, RunnerCapacity{Slots: 20, Nodes: 1}},
		{"the node selector picks nodes", []*corev1.Node{node("a", "1", "8Gi"), node("b", "1", "8Gi")}, nil, func(p *RunnerPlacement) {
			p.NodeSelector = map[string]string{"kubernetes.io/hostname": "b"}
		}, RunnerCapacity{Slots: 10, Nodes: 1}},
		{"a resource the node lacks", []*corev1.Node{node("a", "8", "16Gi")}, nil, func(p *RunnerPlacement) {
			p.Requests = corev1.ResourceList{"example.com/runner": resource.MustParse("1")}
		}, RunnerCapacity{Slots: 0, Nodes: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := runner
			if c.placement != nil {
				c.placement(&p)
			}
			if got := RunnerSlots(c.nodes, c.pods, p); got != c.want {
				t.Errorf("capacity %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestClusterRunnersFollowTheNodes: the bound is counted at each admission, so a node that
// joins adds slots; a refusal has the numbers.
func TestClusterRunnersFollowTheNodes(t *testing.T) {
	nodes := []*corev1.Node{node("a", "200m", "4Gi")}
	c := &ClusterRunners{
		Placement: (&Job{Namespace: "fulfiller"}).Placement(),
		Observe:   func(context.Context) ([]*corev1.Node, []*corev1.Pod, error) { return nodes, nil, nil },
	}
	ctx := context.Background()
	if err := c.Admit(ctx, tfrunner.Request{}, Load{Runs: 1}); err != nil {
		t.Fatalf("second of two slots: %v", err)
	}
	err := c.Admit(ctx, tfrunner.Request{}, Load{Runs: 2})
	var refused *AdmissionError
	if !errors.As(err, &refused) || refused.Reason != v1alpha1.ReasonWaitingForRunner ||
		refused.Message != "2 of 2 tofu runs in progress (the cluster's capacity for runner pods of 100m CPU, 256Mi memory: 1 nodes may run them): waiting for a runner" {
		t.Fatalf("full: %v", err)
	}
	nodes = append(nodes, node("b", "1", "4Gi"))
	if err := c.Admit(ctx, tfrunner.Request{}, Load{Runs: 2}); err != nil {
		t.Errorf("after a node joined: %v", err)
	}
	c.Observe = func(context.Context) ([]*corev1.Node, []*corev1.Pod, error) {
		return nil, nil, errors.New("cache not synced")
	}
	if err := c.Admit(ctx, tfrunner.Request{}, Load{}); err == nil || errors.Is(err, ErrBusy) {
		t.Errorf("unobservable cluster: %v", err)
	}
}

// TestAPIBudgets: a budget starts full, admits runs while it holds their estimate, is spent
// only by runs that start, refills at the cloud's rate, and is shared by runs that name it.
func TestAPIBudgets(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	demand := func(req tfrunner.Request) []APIDemand {
		switch req.Family {
		case "cloud":
			return []APIDemand{{Budget: "project " + req.Env["TOKEN"], Limit: 3600, Per: time.Hour, Requests: map[tfrunner.Operation]int{tfrunner.Apply: 1000, tfrunner.Destroy: 500}[req.Operation]}}
		case "huge":
			return []APIDemand{{Budget: "huge", Limit: 10, Per: time.Hour, Requests: 50}}
		}
		return nil
	}
	budgets := NewAPIBudgets(clk, demand)
	store := &memStore{started: map[string]bool{}}
	l := NewLimiter(budgets)
	ctx := context.Background()
	req := func(name, family, token string, op tfrunner.Operation) tfrunner.Request {
		return tfrunner.Request{Name: name, Family: family, Operation: op, Env: map[string]string{"TOKEN": token}}
	}
	start := func(r tfrunner.Request) error { return l.Start(ctx, r, store.steps(r.Name)) }
	for i := range 3 {
		if err := start(req(fmt.Sprintf("a-%d-apply-1", i), "cloud", "one", tfrunner.Apply)); err != nil {
			t.Fatalf("apply %d of a full budget: %v", i, err)
		}
	}
	err := start(req("a-3-apply-1", "cloud", "one", tfrunner.Apply))
	var refused *AdmissionError
	if !errors.As(err, &refused) || !errors.Is(err, ErrBusy) || refused.Reason != v1alpha1.ReasonWaitingForAPIBudget || refused.RetryAfter != 400*time.Second ||
		refused.Message != "project one allows 3600 API requests per hour; 600 are left for runs, and one apply makes about 1000: enough again in 6m40s" {
		t.Fatalf("past the budget: %v (%+v)", err, refused)
	}
	if err := start(req("a-0-destroy-1", "cloud", "one", tfrunner.Destroy)); err != nil {
		t.Errorf("a destroy within what is left: %v", err)
	}
	if err := start(req("b-0-apply-1", "cloud", "two", tfrunner.Apply)); err != nil {
		t.Errorf("another project's budget: %v", err)
	}
	if err := start(req("c-0-apply-1", "", "", tfrunner.Apply)); err != nil {
		t.Errorf("a run without demands: %v", err)
	}
	clk.Step(899 * time.Second) // 100 + 899 left
	if err := start(req("a-3-apply-1", "cloud", "one", tfrunner.Apply)); !errors.Is(err, ErrBusy) {
		t.Errorf("one request short: %v", err)
	}
	clk.Step(time.Second)
	if err := start(req("a-3-apply-1", "cloud", "one", tfrunner.Apply)); err != nil {
		t.Errorf("refilled: %v", err)
	}
	if err := start(req("a-3-apply-1", "cloud", "one", tfrunner.Apply)); err != nil {
		t.Errorf("an existing run is not admitted again: %v", err)
	}

	// A run another budget refuses spends nothing.
	l = NewLimiter(budgets, MaxRuns(0))
	clk.Step(time.Hour)
	if err := l.Start(ctx, req("b-1-apply-1", "cloud", "two", tfrunner.Apply), store.steps("b-1-apply-1")); !errors.Is(err, ErrBusy) {
		t.Fatalf("refused by the cap: %v", err)
	}
	l = NewLimiter(budgets)
	for i := range 3 {
		name := fmt.Sprintf("b-%d-apply-2", i)
		if err := l.Start(ctx, req(name, "cloud", "two", tfrunner.Apply), store.steps(name)); err != nil {
			t.Errorf("apply %d after a refusal elsewhere: %v", i, err)
		}
	}
	// A run that needs more than the whole budget waits for it to be full.
	if err := start(req("h-0-apply-1", "huge", "", tfrunner.Apply)); err != nil {
		t.Errorf("an estimate above the limit, full budget: %v", err)
	}
	if err := start(req("h-1-apply-1", "huge", "", tfrunner.Apply)); !errors.Is(err, ErrBusy) {
		t.Errorf("an estimate above the limit, empty budget: %v", err)
	}
}
