// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package e2e drives the whole pipeline on the local environment: the real control plane,
// the fulfiller binary (Karpenter core inside), real tofu runs of the simulated node type and
// real joins. Runs are Kubernetes Jobs (the executor of a cluster), whose pods a stand-in
// kubelet runs on this machine; E2E_EXECUTOR=local runs them as child processes instead.
package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

var env struct {
	executor string
	bin      string // the development binary (controller, runners, simulated machines)
	dir      string
	root     string // repository root
	kube     client.Client
	vars     map[string]string
	kubectl  string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if flagValue("test.list") != "" {
		return m.Run() // listing the tests needs no environment
	}
	_, file, _, _ := runtime.Caller(0)
	env.root = filepath.Join(filepath.Dir(file), "..", "..")
	tmp, err := os.MkdirTemp("", "fulfiller-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	shards, err := shardCount()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var names []string
	if shards > 1 {
		if names, err = listTests(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// The development binary: the environment's controller; its local executor starts the
	// runner binary beside it, and modules/sim and the stand-ins the machine binary. Copies
	// of this binary (shards_test.go) are given the one built here.
	if env.bin = os.Getenv(devBinEnv); env.bin == "" {
		if env.bin, err = devenv.BuildDevBinaries(env.root, tmp); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if len(names) > 1 {
		return runShards(env.bin, deal(names, shards))
	}
	if env.kubectl, err = testenv.Tool("kubectl"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.dir = filepath.Join(tmp, "env")
	env.executor = cmp.Or(os.Getenv("E2E_EXECUTOR"), devenv.ExecutorJob)
	down, err := devenv.UpWith(env.bin, env.dir, env.executor)
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
	if env.vars, err = devenv.Vars(env.dir, filepath.Join(env.root, "modules")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	audit, err := startUserDataAudit(env.dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := audit.check(); err != nil {
			fmt.Fprintln(os.Stderr, "the real tools refuse user data the controller rendered:", err)
			code = 1
		}
	}
	if code != 0 {
		dumpLogs()
		if keep := os.Getenv("E2E_KEEP_LOGS"); keep != "" {
			_ = exec.Command("cp", "-r", env.dir, keep).Run()
		}
	}
	return code
}

func dumpLogs() { devenv.DumpLogs(env.dir) }

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func eventually(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := devenv.Poll(ctx, timeout, 500*time.Millisecond, what, cond); err != nil {
		t.Fatal(err)
	}
}

// nodeClass builds a TofuNodeClass of the simulated module with the given node types.
func nodeClass(name string, types ...v1alpha1.NodeType) *v1alpha1.TofuNodeClass {
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:    v1alpha1.FamilySim,
			Module:    v1alpha1.ModuleSource{Source: filepath.Join(env.vars["MODULES"], "sim"), Version: "e2e"},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: env.vars["API_SERVER"], TokenTTL: metav1.Duration{Duration: 15 * time.Minute}},
			Variables: map[string]string{"sim_dir": env.vars["SIM_DIR"], "boot_delay": "1s"},
			NodeTypes: types,
		},
	}
}

func nodeType(name, price string, vars map[string]string) v1alpha1.NodeType {
	v := map[string]string{"cpu": "2", "memory": "4Gi"}
	for k, val := range vars {
		v[k] = val
	}
	return v1alpha1.NodeType{
		Name:               name,
		Capacity:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		Overhead:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		ProviderIDTemplate: "sim://{name}",
		Offerings:          []v1alpha1.Offering{{Zone: "sim-a", Price: price}},
		Variables:          v,
	}
}

func nodePool(name, class string) *karpv1.NodePool {
	return &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
				NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.Group, Kind: "TofuNodeClass", Name: class},
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}},
			}},
			Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: karpv1.MustParseNillableDuration("5s")},
		},
	}
}

func deployment(name, pool string, replicas int32, cpu string) *appsv1.Deployment {
	return devenv.Workload(name, pool, replicas, cpu)
}

func create(t *testing.T, ctx context.Context, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.kube.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// cleanup deletes a scenario's workload, pool and class, and waits until its machines are
// destroyed and their states removed.
func cleanup(t *testing.T, deploy, pool, class string) {
	t.Helper()
	ctx := ctxFor(t, 4*time.Minute)
	_ = env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: deploy}})
	_ = env.kube.Delete(ctx, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: pool}})
	eventually(t, ctx, 3*time.Minute, "every claim of pool "+pool+" to be destroyed", func(ctx context.Context) (bool, error) {
		ok, _, err := devenv.Drained(ctx, env.kube)
		return ok, err
	})
	_ = env.kube.Delete(ctx, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: class}})
	assertNoMachines(t)
}

// assertNoMachines checks that no simulated machine is left: each one keeps a state dir
// that the module's destroy removes.
func assertNoMachines(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(env.vars["SIM_DIR"])
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("machine %s was left behind", e.Name())
	}
}

// fulfillmentTracker records every Fulfillment that ever existed during a test, with the
// last state seen of each.
type fulfillmentTracker struct {
	mu   sync.Mutex
	seen map[string]*v1alpha1.Fulfillment
	stop func()
}

func trackFulfillments(t *testing.T) *fulfillmentTracker {
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: env.dir}.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: env.kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &v1alpha1.FulfillmentList{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &fulfillmentTracker{seen: map[string]*v1alpha1.Fulfillment{}, stop: func() { w.Stop(); cancel() }}
	go func() {
		for ev := range w.ResultChan() {
			if f, ok := ev.Object.(*v1alpha1.Fulfillment); ok && ev.Type != watch.Error {
				tr.mu.Lock()
				tr.seen[f.Name] = f.DeepCopy()
				tr.mu.Unlock()
			}
		}
	}()
	t.Cleanup(tr.stop)
	return tr
}

// byName returns the last state seen of a Fulfillment.
func (tr *fulfillmentTracker) byName(name string) *v1alpha1.Fulfillment {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.seen[name]
}

func (tr *fulfillmentTracker) byType(nodeType string) []*v1alpha1.Fulfillment {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []*v1alpha1.Fulfillment
	for _, f := range tr.seen {
		if f.Spec.NodeType == nodeType {
			out = append(out, f)
		}
	}
	return out
}

func fulfillments(t *testing.T, ctx context.Context) []v1alpha1.Fulfillment {
	t.Helper()
	list := &v1alpha1.FulfillmentList{}
	if err := env.kube.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func clientset(t *testing.T) kubernetes.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: env.dir}.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(env.kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+devenv.Layout{Dir: env.dir}.Kubeconfig())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tokenOf returns the bootstrap token inside a claim's user data.
func tokenOf(t *testing.T, ctx context.Context, f *v1alpha1.Fulfillment) string {
	t.Helper()
	secret := &corev1.Secret{}
	if err := env.kube.Get(ctx, client.ObjectKey{Namespace: devenv.Namespace, Name: f.Status.UserDataSecret}, secret); err != nil {
		t.Fatal(err)
	}
	jc, err := bootstrap.ParseUserData(secret.Data[classconfig.UserDataKey])
	if err != nil {
		t.Fatal(err)
	}
	return jc.Discovery.BootstrapToken.Token
}

// whoAmI authenticates with a bootstrap token.
func whoAmI(ctx context.Context, token string) (*authenticationv1.SelfSubjectReview, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: env.dir}.Kubeconfig())
	if err != nil {
		return nil, err
	}
	anon := rest.AnonymousClientConfig(cfg)
	anon.BearerToken = token
	cs, err := kubernetes.NewForConfig(anon)
	if err != nil {
		return nil, err
	}
	return cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
}

// orphanToken creates a bootstrap token Secret of a claim that does not exist; the orphan
// collector must delete it.
func orphanToken(t *testing.T, ctx context.Context) string {
	t.Helper()
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	secret := bootstrap.TokenSecret(tok, bootstrap.TokenSecretOptions{
		Expires: time.Now().Add(time.Hour), Labels: map[string]string{keys.LabelNodeClaim: orphanClaim},
	})
	if err := env.kube.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	return secret.Name
}

// orphanClaim names the claim of orphanToken, which never exists.
const orphanClaim = "gone-claim"

// startScenario creates a scenario's NodeClass and NodePool and waits until the class is Ready.
func startScenario(t *testing.T, ctx context.Context, class *v1alpha1.TofuNodeClass, pool *karpv1.NodePool) {
	t.Helper()
	create(t, ctx, class, pool)
	eventually(t, ctx, time.Minute, "nodeclass "+class.Name+" to be Ready", func(ctx context.Context) (bool, error) {
		return devenv.NodeClassReady(ctx, env.kube, class.Name)
	})
}

// runLog returns what a run printed: `kubectl logs job/<run>` for a runner Job (through the
// API server's log path, as a user reads it), the run's log file for a local run.
func runLog(t *testing.T, run v1alpha1.Run) string {
	t.Helper()
	if env.executor == devenv.ExecutorJob {
		if run.Log != "job/"+run.Name {
			t.Errorf("run %s: log %q, want job/%s", run.Name, run.Log, run.Name)
		}
		return kubectl(t, "-n", devenv.Namespace, "logs", "job/"+run.Name)
	}
	data, err := os.ReadFile(run.Log)
	if err != nil {
		t.Fatalf("reading the log of run %s: %v", run.Name, err)
	}
	return string(data)
}

// startedRuns counts the runs the executor ever started for a claim's operation: runner Jobs
// labelled with the claim, or local run folders.
func startedRuns(t *testing.T, ctx context.Context, claim, op string) int {
	t.Helper()
	if env.executor == devenv.ExecutorJob {
		jobs, err := clientset(t).BatchV1().Jobs(devenv.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: keys.LabelNodeClaim + "=" + claim + ",fulfiller.sh/operation=" + op,
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(jobs.Items)
	}
	runs, err := os.ReadDir(devenv.Layout{Dir: env.dir}.Runs())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range runs {
		if strings.HasPrefix(r.Name(), claim+"-"+op+"-") {
			n++
		}
	}
	return n
}

// assertTokenNowhere checks that the secret half of a claim's bootstrap token is in none of
// the places an operator or another tenant can read: the Fulfillment, its events, the
// runner Jobs and their pods, and the command line of any process on this machine (runners,
// tofu, simulated machines). It is only in the user-data Secret and the machine's files.
func assertTokenNowhere(t *testing.T, ctx context.Context, f *v1alpha1.Fulfillment, secret string) {
	t.Helper()
	cs := clientset(t)
	var places []string
	check := func(what string, obj any) {
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), secret) {
			places = append(places, what)
		}
	}
	check("fulfillment "+f.Name, f)
	events, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("events", events)
	jobs, err := cs.BatchV1().Jobs(devenv.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("runner jobs", jobs)
	pods, err := cs.CoreV1().Pods(devenv.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("runner pods", pods)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if data, err := os.ReadFile(p); err == nil && strings.Contains(string(data), secret) {
			places = append(places, "the command line of process "+filepath.Base(filepath.Dir(p)))
		}
	}
	if len(places) > 0 {
		t.Errorf("the bootstrap token of %s appears in: %s", f.Name, strings.Join(places, ", "))
	}
}

// scale sets a Deployment's replicas.
func scale(t *testing.T, ctx context.Context, name string, replicas int32) {
	t.Helper()
	deploy := &appsv1.Deployment{}
	if err := env.kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, deploy); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(deploy.DeepCopy())
	deploy.Spec.Replicas = &replicas
	if err := env.kube.Patch(ctx, deploy, patch); err != nil {
		t.Fatal(err)
	}
}

// killController kills the environment's controller at once (SIGKILL, as a node crash would)
// and returns its process ID; `fulfiller dev` starts it again.
func killController(t *testing.T) int {
	t.Helper()
	pidData, err := os.ReadFile(devenv.Layout{Dir: env.dir}.ControllerPID())
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidData)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the controller: %v", err)
	}
	return pid
}
