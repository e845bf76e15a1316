// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package soak churns the local environment at random for a while and checks, every 10 s,
// that nothing is lost or left behind: bursts and scale-downs of two Deployments on two
// NodePools, class edits that drift their nodes, claims deleted mid-apply, controller kills
// and runner kills, from a seeded source (SOAK_SEED replays a run). It runs on an
// environment of its own (`fulfiller-dev dev up`, the Job executor), for SOAK_DURATION of
// churn (2 minutes unless set; `make soak` runs an hour), then scales to zero and checks that
// no machine, state, token or lock is left. It prints a report and fails on any violation.
package soak

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/kubelet"
)

var env struct {
	dir  string
	kube client.Client
	cs   kubernetes.Interface
	vars map[string]string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	tmp, err := os.MkdirTemp("", "fulfiller-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin, err := devenv.BuildDevBinaries(root, tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.dir = filepath.Join(tmp, "env")
	down, err := devenv.UpWith(bin, env.dir, devenv.ExecutorJob)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		dumpLogs()
		return 1
	}
	defer func() {
		if err := down(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	if env.kube, err = devenv.Client(env.dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: env.dir}.Kubeconfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env.vars, err = devenv.Vars(env.dir, filepath.Join(root, "modules")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		dumpLogs()
		if keep := os.Getenv("SOAK_KEEP_LOGS"); keep != "" {
			_ = exec.Command("cp", "-r", env.dir, keep).Run()
		}
	}
	return code
}

func dumpLogs() { devenv.DumpLogs(env.dir) }

// The soak's pools: a class, a NodePool and a Deployment of each name.
var pools = []string{"soak-a", "soak-b"}

const (
	// maxReplicas per Deployment: pods of 900m, two to a 2-CPU node, so at most three nodes
	// a pool (and their replacements while they drift), within the machine's two cores.
	maxReplicas = 6
	// joinTimeout of the soak's node types (the default is 10 minutes).
	joinTimeout = 2 * time.Minute
	// checkEvery is how often the invariants are checked.
	checkEvery = 10 * time.Second
)

func nodeClass(name string) *v1alpha1.TofuNodeClass {
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:    v1alpha1.FamilySim,
			Module:    v1alpha1.ModuleSource{Source: filepath.Join(env.vars["MODULES"], "sim"), Version: "soak"},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: env.vars["API_SERVER"], TokenTTL: metav1.Duration{Duration: 15 * time.Minute}},
			// apply_delay: the create call takes 5 s, so that claims are often mid-apply when
			// they are deleted or their runner is killed.
			Variables: map[string]string{"sim_dir": env.vars["SIM_DIR"], "boot_delay": "1s", "apply_delay": "5"},
			NodeTypes: []v1alpha1.NodeType{{
				Name:               name + "-small",
				Capacity:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
				Overhead:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				ProviderIDTemplate: "sim://{name}",
				Offerings:          []v1alpha1.Offering{{Zone: "sim-a", Price: "0.01"}},
				Variables:          map[string]string{"cpu": "2", "memory": "4Gi"},
				JoinTimeout:        &metav1.Duration{Duration: joinTimeout},
			}},
		},
	}
}

func nodePool(name string) *karpv1.NodePool {
	return &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
				NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.Group, Kind: "TofuNodeClass", Name: name},
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}},
			}},
			Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: karpv1.MustParseNillableDuration("5s")},
		},
	}
}

// settings of a soak run, from the environment.
func settings(t *testing.T) (time.Duration, uint64) {
	d := 2 * time.Minute
	if s := os.Getenv("SOAK_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			t.Fatalf("SOAK_DURATION=%q: want a positive Go duration such as 1h", s)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SOAK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SOAK_SEED=%q: want an unsigned integer", s)
		}
	}
	return d, seed
}

// TestSoak applies random churn for SOAK_DURATION, checks the invariants every 10 s
// (invariants_test.go), then scales to zero and checks that nothing is left.
func TestSoak(t *testing.T) {
	duration, seed := settings(t)
	rep := &report{seed: seed, duration: duration, faults: map[string]int{}, skipped: map[string]int{}, seen: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), duration+20*time.Minute)
	defer cancel()
	t.Logf("soak: seed %d, %s of churn (SOAK_SEED=%d replays the same choices)", seed, duration, seed)

	for _, name := range pools {
		for _, obj := range []client.Object{nodeClass(name), nodePool(name), devenv.Workload(name, name, 2, "900m")} {
			if err := env.kube.Create(ctx, obj); err != nil {
				t.Fatalf("creating %T %s: %v", obj, name, err)
			}
		}
	}
	for _, name := range pools {
		if err := devenv.Poll(ctx, time.Minute, 500*time.Millisecond, "nodeclass "+name+" to be Ready", func(ctx context.Context) (bool, error) {
			return devenv.NodeClassReady(ctx, env.kube, name)
		}); err != nil {
			t.Fatal(err)
		}
	}

	chk := newChecker(rep)
	checks, stopChecks := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(checkEvery)
		defer tick.Stop()
		for {
			select {
			case <-checks.Done():
				return
			case <-tick.C:
				chk.check(checks)
			}
		}
	})

	start := time.Now()
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ch := &churner{rng: rng, rep: rep}
	for time.Since(start) < duration && ctx.Err() == nil {
		ch.step(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(2000+rng.IntN(6000)) * time.Millisecond):
		}
	}
	rep.churned = time.Since(start)

	// Scale to zero; the checks go on while everything is destroyed.
	for _, name := range pools {
		if err := setReplicas(ctx, name, 0); err != nil {
			t.Errorf("scaling %s to zero: %v", name, err)
		}
	}
	drainStart := time.Now()
	var left string
	err := devenv.Poll(ctx, 10*time.Minute, time.Second, "every claim to be destroyed after the scale to zero", func(ctx context.Context) (bool, error) {
		ok, what, err := devenv.Drained(ctx, env.kube)
		left = what
		return ok, err
	})
	rep.drained = time.Since(drainStart)
	stopChecks()
	wg.Wait()
	if err != nil {
		rep.violate("drain", "", fmt.Sprintf("%v: left %s", err, left))
	}
	chk.final(ctx)
	for _, name := range pools {
		_ = env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
		_ = env.kube.Delete(ctx, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}})
		_ = env.kube.Delete(ctx, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}

	out := rep.String()
	t.Log("\n" + out)
	if path := os.Getenv("SOAK_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
	if n := len(rep.violations); n > 0 {
		t.Errorf("%d invariant violations (replay with SOAK_SEED=%d)", n, seed)
	}
}

// churner injects one random fault at a time.
type churner struct {
	rng *rand.Rand
	rep *report
	// lastControllerKill: a controller is killed at most every 30 s, so that it is up most
	// of the time.
	lastControllerKill time.Time
}

// faultKinds and their weights.
var faultKinds = []struct {
	kind   string
	weight int
}{
	{"burst", 4},
	{"scale-down", 2},
	{"drift", 1},
	{"delete-mid-apply", 2},
	{"controller-kill", 1},
	{"runner-kill", 3},
}

func (c *churner) step(ctx context.Context) {
	total := 0
	for _, f := range faultKinds {
		total += f.weight
	}
	n := c.rng.IntN(total)
	kind := ""
	for _, f := range faultKinds {
		if n < f.weight {
			kind = f.kind
			break
		}
		n -= f.weight
	}
	pool := pools[c.rng.IntN(len(pools))]
	// Every choice is drawn before anything is read from the cluster, so that a seed makes
	// the same sequence of draws whatever the cluster answers.
	amount, pick := c.rng.IntN(maxReplicas)+1, c.rng.IntN(1<<30)
	detail, err := c.inject(ctx, kind, pool, amount, pick)
	switch {
	case err != nil:
		c.rep.logf("%-17s not injected: %v", kind, err)
		c.rep.skip(kind)
	case detail == "":
		c.rep.logf("%-17s no target", kind)
		c.rep.skip(kind)
	default:
		c.rep.fault(kind, detail)
	}
}

// inject applies a fault; it returns what it did, or "" when there was nothing to do it to.
func (c *churner) inject(ctx context.Context, kind, pool string, amount, pick int) (string, error) {
	switch kind {
	case "burst", "scale-down":
		deploy := &appsv1.Deployment{}
		if err := env.kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: pool}, deploy); err != nil {
			return "", err
		}
		cur := int(*deploy.Spec.Replicas)
		want := min(cur+amount, maxReplicas)
		if kind == "scale-down" {
			want = max(cur-amount, 0)
		}
		if want == cur {
			return "", nil
		}
		return fmt.Sprintf("%s %d → %d", pool, cur, want), setReplicas(ctx, pool, int32(want))
	case "drift":
		class := &v1alpha1.TofuNodeClass{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: pool}, class); err != nil {
			return "", err
		}
		patch := client.MergeFrom(class.DeepCopy())
		next := "2s"
		if class.Spec.Variables["boot_delay"] == next {
			next = "1s"
		}
		class.Spec.Variables["boot_delay"] = next
		return fmt.Sprintf("class %s boot_delay → %s", pool, next), env.kube.Patch(ctx, class, patch)
	case "delete-mid-apply":
		runs, err := awaitRuns(ctx, "apply")
		if err != nil || len(runs) == 0 {
			return "", err
		}
		r := runs[pick%len(runs)]
		err = env.kube.Delete(ctx, &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: r.claim}})
		return fmt.Sprintf("nodeclaim %s during run %s", r.claim, r.run), client.IgnoreNotFound(err)
	case "controller-kill":
		if time.Since(c.lastControllerKill) < 30*time.Second {
			return "", nil
		}
		data, err := os.ReadFile(devenv.Layout{Dir: env.dir}.ControllerPID())
		if err != nil {
			return "", err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return "", err
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return "", fmt.Errorf("killing the controller (pid %d): %w", pid, err)
		}
		c.lastControllerKill = time.Now()
		return fmt.Sprintf("controller pid %d", pid), nil
	case "runner-kill":
		runs, err := awaitRuns(ctx, "")
		if err != nil || len(runs) == 0 {
			return "", err
		}
		r := runs[pick%len(runs)]
		pods, err := env.cs.CoreV1().Pods(devenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + r.run})
		if err != nil {
			return "", err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase != corev1.PodRunning {
				continue
			}
			if err := kubelet.KillContainer(devenv.Layout{Dir: env.dir}.Kubelet(), p); err != nil {
				return "", nil // it ended meanwhile
			}
			return fmt.Sprintf("runner of %s (%s of %s)", r.run, r.op, r.claim), nil
		}
		return "", nil
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}

func setReplicas(ctx context.Context, name string, n int32) error {
	deploy := &appsv1.Deployment{}
	if err := env.kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, deploy); err != nil {
		return err
	}
	patch := client.MergeFrom(deploy.DeepCopy())
	deploy.Spec.Replicas = &n
	return env.kube.Patch(ctx, deploy, patch)
}

type runRef struct{ claim, run, op string }

// awaitRuns waits up to 10 s for runs in progress (of one operation, or any) and lists them.
func awaitRuns(ctx context.Context, op string) ([]runRef, error) {
	var runs []runRef
	err := devenv.Poll(ctx, 10*time.Second, 500*time.Millisecond, "a run in progress", func(ctx context.Context) (bool, error) {
		var err error
		runs, err = runningRuns(ctx, op)
		return len(runs) > 0, err
	})
	if len(runs) == 0 && ctx.Err() == nil {
		err = nil // nothing ran meanwhile: no target
	}
	return runs, err
}

// runningRuns lists the runs in progress (of one operation, or any), in a stable order.
func runningRuns(ctx context.Context, op string) ([]runRef, error) {
	list := &v1alpha1.FulfillmentList{}
	if err := env.kube.List(ctx, list); err != nil {
		return nil, err
	}
	var out []runRef
	for _, f := range list.Items {
		for _, r := range f.Status.Runs {
			if r.Phase == v1alpha1.RunRunning && (op == "" || r.Operation == op) {
				out = append(out, runRef{claim: f.Name, run: r.Name, op: r.Operation})
			}
		}
	}
	slices.SortFunc(out, func(a, b runRef) int { return cmp.Compare(a.run, b.run) })
	return out, nil
}
