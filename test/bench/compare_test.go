// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/proc"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// The node both providers make in the comparison, and the pods that each need one.
const (
	benchZone   = "sim-a"
	benchCPU    = "2"
	benchMemory = "4Gi"
	benchPodCPU = "1500m"
	benchPool   = "bench"
)

// burstCase is one burst of the comparison: nodes pods that each need a node of their own,
// on machines whose cloud API takes create to make one and which take boot from power-on to
// registering their Node.
type burstCase struct {
	name    string
	nodes   int
	create  time.Duration
	boot    time.Duration
	hetzner bool // the fulfiller runs modules/hetzner-cloud against the Hetzner Cloud stand-in
}

// burstCases are the cases of BenchmarkBurstVersusKwok; BENCH_CASES (comma-separated names)
// picks some.
func burstCases() []burstCase {
	all := []burstCase{
		{name: "10-boot0", nodes: 10}, {name: "10-boot30", nodes: 10, boot: 30 * time.Second},
		{name: "50-boot0", nodes: 50}, {name: "50-boot30", nodes: 50, boot: 30 * time.Second},
		{name: "100-boot0", nodes: 100}, {name: "100-boot30", nodes: 100, boot: 30 * time.Second},
		{name: "hetzner-50", nodes: 50, create: 30 * time.Second, boot: 30 * time.Second, hetzner: true},
	}
	pick := os.Getenv("BENCH_CASES")
	if pick == "" {
		return all
	}
	var cases []burstCase
	for _, c := range all {
		if slicesContains(strings.Split(pick, ","), c.name) {
			cases = append(cases, c)
		}
	}
	return cases
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

// burstResult is what one burst measured.
type burstResult struct {
	// bound: from creating the workload until every pod was bound to a node.
	bound time.Duration
	// launched: per claim, from its creation to Launched=True (Create returned), as a watch
	// on NodeClaims saw them; registered: per claim, from the burst to Registered=True.
	launched, registered []time.Duration
	// create: the Create latency quantiles (p50, p90, p99) of Karpenter's
	// karpenter_cloudprovider_duration_seconds histogram, where the provider has it; a
	// quantile in the histogram's last bucket is its highest finite bound, createMax.
	create    []time.Duration
	createMax time.Duration
	pods      int
	// peakRSS is the controller's peak resident memory (VmHWM), in bytes.
	peakRSS int64
	// cpu: where the CPU went from the burst's start until every claim was registered.
	cpu cpuUse
	// api: the API server's create latencies and queue waits, over the environment's life.
	api apiLatency
	// writes: the API server's write requests from the burst's start until every claim was
	// registered, by resource and verb (everyone's: the API server does not say who wrote).
	writes apiWrites
	// start is when the workload was created; serversCreated, in the Hetzner-like case, when
	// the stand-in created each server, from start.
	start          time.Time
	serversCreated []time.Duration
	// claimsCreated: when the watch saw each claim, from start; appliesStarted: when each
	// Fulfillment's first apply started (status.stages.applyStarted, to the second).
	claimsCreated, appliesStarted []time.Duration
	// lastNode, in a burst of the floor, is the earliest the last node made by its runs could
	// register, from start.
	lastNode time.Duration
}

// BenchmarkBurstVersusKwok compares the fulfiller with Karpenter's own kwok provider, in one
// session and interleaved (kwok, the floor, fulfiller, kwok, the floor, fulfiller, ...) so
// that the machine's load hits them alike. Each burst gets a fresh control plane of the same
// binaries; the workload is the same Deployment (devenv.Workload) of pods that each need a
// node of their own. kwok
// models boot by its NodeClass's nodeRegistrationDelay (its Node appears that long after
// Create), the fulfiller by modules/sim's boot_delay (the simulated machine joins that long
// after its power-on) with the local executor; the Hetzner-like case runs
// modules/hetzner-cloud with the real hcloud provider against the Hetzner Cloud stand-in,
// whose create action takes 30 s and whose machines boot for 30 s (kwok: a 60 s delay).
// Reported per case, as ratios fulfiller/kwok: the time until every pod was bound, the
// claims' create→Launched latency (p50/p90/p99) and the controllers' peak memory; and the
// fulfiller's Create latency from karpenter_cloudprovider_duration_seconds (kwok's main does
// not decorate its provider with these metrics); and the floor of a run per claim
// (floorRuns: kwok's burst with one real run per claim beside it) as a ratio to kwok. With
// BENCH_BASELINE_REV, that revision's fulfiller runs each burst too, after this tree's.
// Nothing is asserted on timing.
func BenchmarkBurstVersusKwok(b *testing.B) {
	ctx := ctxFor(b, 3*time.Hour)
	dir := b.TempDir()
	this := buildFulfillerDev(b, dir)
	var baseline fulfillerBuild
	rev := os.Getenv(baselineRevEnv)
	if rev != "" {
		baseline = buildRevision(b, rev, filepath.Join(dir, "baseline"))
	}
	cases := burstCases()
	n := rounds(1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// kwok, this tree's fulfiller, the baseline's and the floor of a run per claim, per
		// case.
		results := map[string][4][]burstResult{}
		for r := 0; r < n; r++ {
			for _, c := range cases {
				run := filepath.Join(dir, fmt.Sprintf("%s-%d-%d", c.name, i, r))
				got := results[c.name]
				k := burstKwok(b, ctx, filepath.Join(run, "kwok"), c, nil)
				b.Logf("%s round %d: kwok %s", c.name, r+1, k.summary())
				fl := burstKwok(b, ctx, filepath.Join(run, "floor"), c, &this)
				b.Logf("%s round %d: floor (kwok and a run per claim) %s", c.name, r+1, fl.summary())
				got[3] = append(got[3], fl)
				f := burstFulfiller(b, ctx, this, filepath.Join(run, "fulfiller"), c)
				b.Logf("%s round %d: fulfiller %s", c.name, r+1, f.summary())
				got[0], got[1] = append(got[0], k), append(got[1], f)
				if baseline.bin != "" {
					f := burstFulfiller(b, ctx, baseline, filepath.Join(run, "baseline"), c)
					b.Logf("%s round %d: fulfiller at %s %s", c.name, r+1, rev, f.summary())
					got[2] = append(got[2], f)
				}
				results[c.name] = got
			}
		}
		b.StopTimer()
		var table strings.Builder
		table.WriteString("| burst | all pods bound, fulfiller/kwok | floor: kwok and a run per claim, /kwok | create→Launched p50/p90/p99, fulfiller/kwok | Create p50/p90/p99 (fulfiller) | last node registered, fulfiller/kwok | peak memory, fulfiller/kwok |")
		if baseline.bin != "" {
			table.WriteString(" all pods bound, " + rev + "/kwok |\n|---|---|---|---|---|---|---|---|\n")
		} else {
			table.WriteString("\n|---|---|---|---|---|---|---|\n")
		}
		for _, c := range cases {
			k, f := merge(results[c.name][0]), merge(results[c.name][1])
			ratio := float64(f.bound) / float64(k.bound)
			b.ReportMetric(ratio, c.name+"-bound-ratio")
			b.ReportMetric(float64(f.peakRSS)/float64(k.peakRSS), c.name+"-memory-ratio")
			kl, fl := quantiles(k.launched), quantiles(f.launched)
			floor := "–"
			if fls := results[c.name][3]; len(fls) > 0 {
				fb := merge(fls).bound
				b.ReportMetric(float64(fb)/float64(k.bound), c.name+"-floor-bound-ratio")
				floor = fmt.Sprintf("%.2f× (%s)", float64(fb)/float64(k.bound), round(fb))
			}
			fmt.Fprintf(&table, "| %d nodes, create %s, boot %s | %.2f× (%s / %s) | %s | %s | %s | %.2f× (%s / %s) | %.2f× (%d / %d MiB) |",
				c.nodes, c.create, c.boot, ratio, round(f.bound), round(k.bound), floor,
				ratios(fl, kl), createDurations(f.create, f.createMax),
				float64(maxOf(f.registered))/float64(maxOf(k.registered)), round(maxOf(f.registered)), round(maxOf(k.registered)),
				float64(f.peakRSS)/float64(k.peakRSS), f.peakRSS>>20, k.peakRSS>>20)
			if baseline.bin != "" {
				base := merge(results[c.name][2])
				b.ReportMetric(float64(base.bound)/float64(k.bound), c.name+"-baseline-bound-ratio")
				fmt.Fprintf(&table, " %.2f× (%s) |", float64(base.bound)/float64(k.bound), round(base.bound))
			}
			table.WriteString("\n")
		}
		table.WriteString("\nCPU from the burst until the last claim registered (medians):\n")
		for _, c := range cases {
			fmt.Fprintf(&table, "- %s: kwok %s; fulfiller %s", c.name, merge(results[c.name][0]).cpu, merge(results[c.name][1]).cpu)
			if fls := results[c.name][3]; len(fls) > 0 {
				fmt.Fprintf(&table, "; floor %s", merge(fls).cpu)
			}
			table.WriteString("\n")
		}
		for _, c := range cases {
			// The first round's writes: counts, not times, and alike from round to round.
			k, f := results[c.name][0][0].writes, results[c.name][1][0].writes
			fmt.Fprintf(&table, "\nAPI server writes per claim, %s, from the burst until every claim registered (first round):\n%s",
				c.name, writesTable(c.nodes, []string{"kwok", "fulfiller"}, []apiWrites{k, f}))
			kAll, kLeases := k.total()
			fAll, fLeases := f.total()
			b.ReportMetric((fAll-fLeases)/float64(c.nodes), c.name+"-writes/claim")
			b.ReportMetric((kAll-kLeases)/float64(c.nodes), c.name+"-kwok-writes/claim")
		}
		b.Logf("fulfiller (local executor) versus Karpenter's kwok provider, medians of %d round(s), load %s:\n%s", n, loadAverage(), table.String())
		b.StartTimer()
	}
}

// burstKwok runs one burst on a fresh kwok environment.
//
// With floor, the burst is the floor of a run per claim (floorRuns): build's runner applies
// the case's module for each claim as it appears. Its pods count as bound no earlier than
// the last node made by the runs could register (lastNode), and the runs' CPU is the role
// runs.
func burstKwok(b *testing.B, ctx context.Context, dir string, c burstCase, floor *fulfillerBuild) burstResult {
	b.Helper()
	env, err := startKwok(ctx, dir, c.create+c.boot)
	if err != nil {
		b.Fatalf("kwok environment: %v", err)
	}
	defer env.stop()
	pool := benchNodePool(karpv1.NodeClassReference{Group: kwokapis.Group, Kind: "KWOKNodeClass", Name: "bench"})
	if err := env.kube.Create(ctx, pool); err != nil {
		b.Fatal(err)
	}
	var runs *floorRuns
	var onSeen func(string)
	if floor != nil {
		if runs, err = newFloorRuns(ctx, *floor, filepath.Join(dir, "floor"), env.cp.Kubeconfig, c); err != nil {
			b.Fatal(err)
		}
		defer runs.close()
		onSeen = func(claim string) { runs.start(ctx, claim) }
	}
	res := burst(b, ctx, env.kube, env.cp.Config, dir, c.nodes, onSeen)
	res.peakRSS = peakRSS(env.karpenter.pid())
	if runs != nil {
		cpu, lastNode, err := runs.wait(res.start)
		if err != nil {
			b.Fatal(err)
		}
		res.bound = max(res.bound, lastNode)
		res.serversCreated = runs.serversCreated(res.start)
		res.lastNode = lastNode
		res.cpu.byRole[roleRuns] = cpu
	}
	return res
}

// burstFulfiller runs one burst on a fresh local environment of the fulfiller.
func burstFulfiller(b *testing.B, ctx context.Context, build fulfillerBuild, dir string, c burstCase) burstResult {
	b.Helper()
	var extraEnv []string
	var hcloud *standin.StandIn
	if c.hetzner {
		rcEnv, err := providersEnv()
		if err != nil {
			b.Fatal(err)
		}
		extraEnv = append(extraEnv, rcEnv)
		hcloud, err = standin.Start(standin.Options{
			CreateDuration: c.create,
			Machines:       &standin.SimMachines{Dir: filepath.Join(dir, "hcloud-machines"), Binary: sim.CommandBeside(build.bin), BootDelay: c.boot},
		})
		if err != nil {
			b.Fatal(err)
		}
		defer hcloud.Close()
	}
	kube, vars, down := devUp(b, build, dir, devenv.ExecutorLocal, extraEnv...)
	defer down()
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: dir}.Kubeconfig())
	if err != nil {
		b.Fatal(err)
	}
	class := simNodeClass(vars, c.boot)
	if c.hetzner {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: "hcloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
			StringData: map[string]string{"HCLOUD_TOKEN": hcloud.Token(), "HCLOUD_ENDPOINT": hcloud.Endpoint()},
		}
		if err := kube.Create(ctx, secret); err != nil {
			b.Fatal(err)
		}
		class = hetznerNodeClass(vars)
	}
	pool := benchNodePool(karpv1.NodeClassReference{Group: v1alpha1.Group, Kind: "TofuNodeClass", Name: class.Name})
	for _, o := range []client.Object{class, pool} {
		if err := kube.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	if err := devenv.Poll(ctx, 2*time.Minute, 250*time.Millisecond, "the nodeclass to be Ready", func(ctx context.Context) (bool, error) {
		return devenv.NodeClassReady(ctx, kube, class.Name)
	}); err != nil {
		b.Fatal(err)
	}
	res := burst(b, ctx, kube, cfg, dir, c.nodes, nil)
	fulfillments := &v1alpha1.FulfillmentList{}
	if err := kube.List(ctx, fulfillments); err != nil {
		b.Fatal(err)
	}
	for _, f := range fulfillments.Items {
		if at := f.Status.Stages.ApplyStarted; at != nil {
			res.appliesStarted = append(res.appliesStarted, at.Sub(res.start))
		}
	}
	if hcloud != nil {
		for _, srv := range hcloud.Servers() {
			res.serversCreated = append(res.serversCreated, srv.Created.Sub(res.start))
		}
	}
	layout := devenv.Layout{Dir: dir}
	if pid, ok := proc.ReadPIDFile(layout.ControllerPID()); ok {
		res.peakRSS = peakRSS(pid)
	}
	if port, err := os.ReadFile(layout.MetricsPortFile()); err == nil {
		res.create, res.createMax = createQuantiles(b, "http://127.0.0.1:"+strings.TrimSpace(string(port))+"/metrics")
	}
	return res
}

// simNodeClass is modules/sim's NodeClass of the comparison.
func simNodeClass(vars map[string]string, boot time.Duration) *v1alpha1.TofuNodeClass {
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: v1alpha1.TofuNodeClassSpec{
			Module:    v1alpha1.ModuleSource{Source: filepath.Join(vars["MODULES"], "sim"), Version: "bench"},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: vars["API_SERVER"]},
			Variables: map[string]string{"sim_dir": vars["SIM_DIR"], "boot_delay": boot.String(), "cpu": benchCPU, "memory": benchMemory},
			NodeTypes: []v1alpha1.NodeType{{
				Name:               "bench",
				Capacity:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(benchCPU), corev1.ResourceMemory: resource.MustParse(benchMemory)},
				ProviderIDTemplate: "sim://{name}",
				Offerings:          []v1alpha1.Offering{{Zone: benchZone, Price: "0.01"}},
			}},
		},
	}
}

// hetznerNodeClass is modules/hetzner-cloud's NodeClass of the comparison: cx23 servers in
// fsn1 (examples/hetzner-cloud's type), the API token and endpoint from the Secret hcloud.
func hetznerNodeClass(vars map[string]string) *v1alpha1.TofuNodeClass {
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-hcloud"},
		Spec: v1alpha1.TofuNodeClassSpec{
			Module:      v1alpha1.ModuleSource{Source: filepath.Join(vars["MODULES"], "hetzner-cloud"), Version: "bench"},
			Credentials: []v1alpha1.CredentialsSource{{SecretName: "hcloud"}},
			Bootstrap:   v1alpha1.BootstrapSpec{APIServerEndpoint: vars["API_SERVER"]},
			Variables:   map[string]string{"cluster": "bench"},
			NodeTypes: []v1alpha1.NodeType{{
				Name: "cx23",
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("3800Mi"),
					corev1.ResourceEphemeralStorage: resource.MustParse("37Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Overhead:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("300Mi")},
				Offerings: []v1alpha1.Offering{{Zone: "fsn1", Price: "0.0056"}},
			}},
		},
	}
}

// benchNodePool is the NodePool "bench" of both providers: on-demand nodes of the class.
func benchNodePool(class karpv1.NodeClassReference) *karpv1.NodePool {
	return &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: benchPool},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
				NodeClassRef: &class,
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}},
			}},
			Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmpty, ConsolidateAfter: karpv1.MustParseNillableDuration("10m")},
		},
	}
}

// burst creates a Deployment of nodes pods that each need a node and waits until every pod is
// bound, watching the NodeClaims meanwhile (onSeen, when set, hears of each new claim), and
// then until every claim is registered; it measures the CPU of the environment in dir over
// that time.
func burst(b *testing.B, ctx context.Context, kube client.Client, cfg *rest.Config, dir string, nodes int, onSeen func(string)) burstResult {
	b.Helper()
	w, err := watchClaims(ctx, cfg, onSeen)
	if err != nil {
		b.Fatal(err)
	}
	defer w.stop()
	writesBefore, err := readAPIWrites(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	cpuBefore := snapshotCPU(dir)
	start := time.Now()
	if err := kube.Create(ctx, devenv.Workload("burst", benchPool, int32(nodes), benchPodCPU)); err != nil {
		b.Fatal(err)
	}
	if err := devenv.Poll(ctx, 20*time.Minute, 200*time.Millisecond, "every pod to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, kube, "default", map[string]string{"app": "burst"}, nodes)
	}); err != nil {
		b.Fatal(err)
	}
	res := burstResult{bound: time.Since(start), pods: nodes, start: start}
	// A pod can be bound the moment its Node lost the unregistered taint, just before its
	// claim is marked Registered.
	_ = devenv.Poll(ctx, 2*time.Minute, 200*time.Millisecond, "every claim to be registered", func(context.Context) (bool, error) {
		return w.allRegistered(), nil
	})
	res.cpu = cpuBetween(cpuBefore, snapshotCPU(dir), time.Since(start))
	writesAfter, err := readAPIWrites(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	res.writes = writesAfter.minus(writesBefore)
	if res.api, err = readAPILatency(ctx, cfg, "fulfillments", "nodeclaims", "nodes", "pods", "leases"); err != nil {
		b.Logf("%v", err)
	}
	res.launched, res.registered = w.latencies(start)
	res.claimsCreated = w.seenSince(start)
	return res
}

// claimWatch records when a watch on NodeClaims saw each claim appear, launch and register.
// A watch the API server ends is made again (a new watch lists every claim as added).
type claimWatch struct {
	// onSeen, when set, is called with each claim's name when the watch first sees it.
	onSeen                     func(name string)
	cancel                     context.CancelFunc
	done                       chan struct{}
	mu                         sync.Mutex
	seen, launched, registered map[string]time.Time
}

func watchClaims(ctx context.Context, cfg *rest.Config, onSeen func(string)) (*claimWatch, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	cw := &claimWatch{onSeen: onSeen, cancel: cancel, done: make(chan struct{}),
		seen: map[string]time.Time{}, launched: map[string]time.Time{}, registered: map[string]time.Time{}}
	w, err := c.Watch(ctx, &karpv1.NodeClaimList{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching NodeClaims: %w", err)
	}
	go func() {
		defer close(cw.done)
		for {
			for ev := range w.ResultChan() {
				if nc, ok := ev.Object.(*karpv1.NodeClaim); ok {
					cw.observe(nc, time.Now())
				}
			}
			for ctx.Err() == nil {
				if w, err = c.Watch(ctx, &karpv1.NodeClaimList{}); err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return cw, nil
}

func (cw *claimWatch) observe(nc *karpv1.NodeClaim, now time.Time) {
	if cw.record(nc, now) && cw.onSeen != nil {
		cw.onSeen(nc.Name)
	}
}

// record notes what the claim shows, and reports whether it is the first sight of it.
func (cw *claimWatch) record(nc *karpv1.NodeClaim, now time.Time) bool {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	_, seen := cw.seen[nc.Name]
	if !seen {
		cw.seen[nc.Name] = now
	}
	for cond, at := range map[string]map[string]time.Time{karpv1.ConditionTypeLaunched: cw.launched, karpv1.ConditionTypeRegistered: cw.registered} {
		if _, ok := at[nc.Name]; !ok && nc.StatusConditions().Get(cond).IsTrue() {
			at[nc.Name] = now
		}
	}
	return !seen
}

func (cw *claimWatch) allRegistered() bool {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return len(cw.registered) == len(cw.seen)
}

// seenSince is when each claim was first seen, from start.
func (cw *claimWatch) seenSince(start time.Time) []time.Duration {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	var out []time.Duration
	for _, at := range cw.seen {
		out = append(out, at.Sub(start))
	}
	return out
}

func (cw *claimWatch) stop() {
	cw.cancel()
	<-cw.done
}

// latencies are each claim's time from appearing to Launched, and from start to Registered.
func (cw *claimWatch) latencies(start time.Time) (launched, registered []time.Duration) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for name, at := range cw.launched {
		launched = append(launched, at.Sub(cw.seen[name]))
	}
	for _, at := range cw.registered {
		registered = append(registered, at.Sub(start))
	}
	return launched, registered
}

// peakRSS is a process's peak resident memory (VmHWM in /proc/<pid>/status), in bytes.
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// createQuantiles reads the Create histogram of karpenter_cloudprovider_duration_seconds
// from a metrics endpoint and returns its p50, p90 and p99, interpolated within buckets as
// Prometheus's histogram_quantile does.
func createQuantiles(b *testing.B, url string) ([]time.Duration, time.Duration) {
	b.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.Logf("reading %s: %v", url, err)
		return nil, 0
	}
	defer resp.Body.Close()
	type bucket struct{ le, count float64 }
	var buckets []bucket
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "karpenter_cloudprovider_duration_seconds_bucket{") || !strings.Contains(line, `method="Create"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `le="`)
		le, rest, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		count, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		bound, err2 := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			bound, err2 = math.Inf(1), nil
		}
		if err == nil && err2 == nil {
			buckets = append(buckets, bucket{bound, count})
		}
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	if len(buckets) < 2 || buckets[len(buckets)-1].count == 0 {
		return nil, 0
	}
	total := buckets[len(buckets)-1].count
	maxFinite := time.Duration(buckets[len(buckets)-2].le * float64(time.Second))
	var out []time.Duration
	for _, q := range []float64{0.5, 0.9, 0.99} {
		rank := q * total
		lower, below := 0.0, 0.0
		for _, bk := range buckets {
			if bk.count >= rank {
				upper := bk.le
				if math.IsInf(upper, 1) {
					upper = lower // the highest finite bound, as histogram_quantile answers
				}
				v := lower
				if bk.count > below {
					v = lower + (upper-lower)*(rank-below)/(bk.count-below)
				}
				out = append(out, time.Duration(v*float64(time.Second)))
				break
			}
			lower, below = bk.le, bk.count
		}
	}
	return out, maxFinite
}

// merge is the median over rounds of each measure (per-claim latencies are pooled).
func merge(rs []burstResult) burstResult {
	var out burstResult
	var bound, rss []time.Duration
	var creates [3][]time.Duration
	var cpu []cpuUse
	for _, r := range rs {
		cpu = append(cpu, r.cpu)
		bound = append(bound, r.bound)
		rss = append(rss, time.Duration(r.peakRSS))
		out.launched = append(out.launched, r.launched...)
		out.registered = append(out.registered, r.registered...)
		for i, c := range r.create {
			creates[i] = append(creates[i], c)
		}
	}
	out.bound, out.peakRSS, out.cpu = median(bound), int64(median(rss)), mergeCPU(cpu)
	if len(rs) > 0 {
		out.pods, out.createMax = rs[0].pods, rs[0].createMax
	}
	if len(creates[0]) > 0 {
		out.create = []time.Duration{median(creates[0]), median(creates[1]), median(creates[2])}
	}
	return out
}

// quantiles are the p50, p90 and p99 of ds (nearest rank).
func quantiles(ds []time.Duration) []time.Duration {
	if len(ds) == 0 {
		return nil
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var out []time.Duration
	for _, q := range []float64{0.5, 0.9, 0.99} {
		out = append(out, s[int(math.Ceil(q*float64(len(s))))-1])
	}
	return out
}

func minOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = round(d).String()
	}
	return strings.Join(parts, " / ")
}

// createDurations formats Create quantiles, those in the histogram's last bucket as "≥max".
func createDurations(ds []time.Duration, maxFinite time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = round(d).String()
		if d >= maxFinite {
			parts[i] = "≥" + round(maxFinite).String()
		}
	}
	return strings.Join(parts, " / ")
}

func ratios(f, k []time.Duration) string {
	if len(f) == 0 || len(k) == 0 {
		return "–"
	}
	parts := make([]string, len(f))
	for i := range f {
		parts[i] = fmt.Sprintf("%.1f×", float64(f[i])/float64(max(k[i], time.Millisecond)))
	}
	return strings.Join(parts, " / ") + fmt.Sprintf(" (%s vs %s)", durations(f), durations(k))
}

func (r burstResult) summary() string {
	timeline := fmt.Sprintf("; claims created %s–%s", round(minOf(r.claimsCreated)), round(maxOf(r.claimsCreated)))
	if len(r.appliesStarted) > 0 {
		timeline += fmt.Sprintf(", applies started %s–%s (to the second)", round(minOf(r.appliesStarted)), round(maxOf(r.appliesStarted)))
	}
	if r.lastNode > 0 {
		timeline += fmt.Sprintf("; the runs' last node could register %s after the burst at the earliest", round(r.lastNode))
	}
	if len(r.serversCreated) > 0 {
		timeline += fmt.Sprintf("; %d servers created (POST /servers answered) from %s to %s after the burst", len(r.serversCreated),
			round(minOf(r.serversCreated)), round(maxOf(r.serversCreated)))
	}
	return fmt.Sprintf("all %d pods bound after %s; %d claims launched: create→Launched p50/p90/p99 %s; %d registered, the last after %s; Create %s; peak memory %d MiB; CPU until the last registered: %s; API server %s%s",
		r.pods, round(r.bound), len(r.launched), durations(quantiles(r.launched)), len(r.registered), round(maxOf(r.registered)),
		createDurations(r.create, r.createMax), r.peakRSS>>20, r.cpu, r.api, timeline)
}
