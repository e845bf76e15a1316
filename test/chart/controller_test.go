// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/proc"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/kubelet"
)

// harness is what the controller's runs in TestInstall share: the binaries, a stand-in
// kubelet for the runner Jobs' pods, the simulated machines' folder.
//
// The controller is the image's binary (cmd/fulfiller), run outside the cluster (there is no
// kubelet for the Deployment's pods) with the installed Deployment's environment and the
// controller ServiceAccount's token, so that it has exactly the chart's RBAC. Its runner Jobs
// run the image's `fulfiller run`: the stand-in kubelet runs the development binary for it,
// whose `run` is the same command and which also has the `sim` that modules/sim's
// provisioners call as $FULFILLER_BINARY, with the pod's service-account token (the runner
// ServiceAccount's) for the kubernetes backend.
type harness struct {
	cs          kubernetes.Interface
	dyn         dynamic.Interface
	dir         string
	bin, devBin string
	machines    string
}

func newHarness(ctx context.Context, t *testing.T, cs kubernetes.Interface) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{cs: cs, dyn: dynamic.NewForConfigOrDie(cp.Config), dir: dir,
		bin: filepath.Join(dir, "fulfiller"), devBin: filepath.Join(dir, "fulfiller-dev"), machines: filepath.Join(dir, "machines")}
	build := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/fulfiller", "./cmd/fulfiller-dev")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fulfiller and fulfiller-dev: %v\n%s", err, out)
	}
	startRunnerKubelet(ctx, t, cs, h.devBin, dir)
	t.Cleanup(func() { stopMachines(t, h.devBin, h.machines) })
	return h
}

// refusesWithoutCRDs starts the controller against the control plane before any CRD is
// installed: it must exit, naming the missing CRDs and the chart that has them.
func (h *harness) refusesWithoutCRDs(ctx context.Context, t *testing.T) {
	ports, err := testenv.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, "controller")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.dir, "KUBECONFIG=" + cp.Kubeconfig,
		"FULFILLER_CLUSTER_NAME=" + testClusterName, "FULFILLER_RUNNER_IMAGE=fulfiller:test", "DISABLE_LEADER_ELECTION=true",
		"METRICS_PORT=" + strconv.Itoa(ports[0]), "HEALTH_PROBE_PORT=" + strconv.Itoa(ports[1])}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || ctx.Err() != nil {
		t.Fatalf("the controller without CRDs: %v, want it to exit with an error\n%s", err, tail(string(out), 4000))
	}
	for _, want := range []string{"refusing to start", "not those of Karpenter core " + testenv.GoModVersion(t, "sigs.k8s.io/karpenter"),
		"nodepools.karpenter.sh: not installed", "nodeclaims.karpenter.sh: not installed", "the fulfiller-crd chart"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the controller's log does not say %q:\n%s", want, tail(string(out), 4000))
		}
	}
}

// controllerProc is one run of `fulfiller controller` as the installed Deployment runs it.
type controllerProc struct {
	t              *testing.T
	logs           *testenv.SyncBuffer
	exited         chan error
	cmd            *exec.Cmd
	metrics, ready string // URLs
	stopped        bool
}

// startController starts the controller with the environment of the Deployment helm installed
// and the controller ServiceAccount's token.
func (h *harness) startController(ctx context.Context, t *testing.T) *controllerProc {
	t.Helper()
	dep, err := h.cs.AppsV1().Deployments(releaseNS).Get(ctx, "fulfiller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := testenv.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	overrides := map[string]string{
		// Free ports on this machine instead of the pod's.
		"METRICS_PORT":       strconv.Itoa(ports[0]),
		"HEALTH_PROBE_PORT":  strconv.Itoa(ports[1]),
		"FULFILLER_RUNS_DIR": filepath.Join(h.dir, "runs"),
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.dir, "KUBECONFIG=" + serviceAccountKubeconfig(ctx, t, h.cs, "fulfiller", h.dir),
		"FULFILLER_TOFU=" + tofu}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			continue // MEMORY_LIMIT, CPU_REQUESTS: from the pod's resources
		}
		if v, ok := overrides[e.Name]; ok {
			e.Value = v
		}
		env = append(env, e.Name+"="+e.Value)
	}
	c := &controllerProc{t: t, logs: &testenv.SyncBuffer{}, exited: make(chan error, 1),
		metrics: "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics", ready: "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/readyz"}
	c.cmd = exec.Command(h.bin, dep.Spec.Template.Spec.Containers[0].Args...)
	c.cmd.Env, c.cmd.Stdout, c.cmd.Stderr, c.cmd.Dir = env, c.logs, c.logs, h.dir
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.exited <- c.cmd.Wait() }()
	t.Cleanup(c.stop)
	return c
}

// stop stops the controller as a pod's termination does (SIGTERM, then SIGKILL after 15 s).
func (c *controllerProc) stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-c.exited:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		err = <-c.exited
	}
	c.t.Logf("controller stopped: %v", proc.WaitError(err))
}

func (c *controllerProc) fail(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Fatalf("%s\ncontroller log (tail):\n%s", fmt.Sprintf(format, args...), tail(c.logs.String(), 4000))
}

// poll waits for cond; it fails as soon as the controller exits or is denied by the API
// server with the chart's RBAC.
func (c *controllerProc) poll(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(pctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-c.exited:
			c.exited <- err
			return false, fmt.Errorf("the controller exited: %w", proc.WaitError(err))
		default:
		}
		if denied := forbiddenLines(c.logs.String()); len(denied) > 0 {
			return false, fmt.Errorf("the controller was denied with the chart's RBAC:\n%s", strings.Join(denied, "\n"))
		}
		return cond(ctx)
	})
	if err != nil {
		c.fail(t, "waiting for %s: %v", what, err)
	}
}

// waitReady waits until the controller is ready (every informer of Karpenter core and the
// fulfiller listed and synced) and holds the chart's leader election Lease, not held by
// previousHolder; it returns the holder.
func (c *controllerProc) waitReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, previousHolder string) string {
	t.Helper()
	c.poll(ctx, t, "the controller's /readyz", 2*time.Minute, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.ready, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	var holder string
	c.poll(ctx, t, "the leader election Lease", time.Minute, func(ctx context.Context) (bool, error) {
		lease, err := cs.CoordinationV1().Leases(releaseNS).Get(ctx, "fulfiller-leader-election", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *lease.Spec.HolderIdentity
		return holder != "" && holder != previousHolder, nil
	})
	return holder
}

// reconciles is how many reconciles of a controller-runtime controller have succeeded, from
// the controller's /metrics.
func (c *controllerProc) reconciles(ctx context.Context, controller string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.metrics, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	prefix := `controller_runtime_reconcile_total{controller="` + controller + `",result="success"} `
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, nil
}

// createNodeClass creates examples/local's NodeClass, as `make demo` fills it in, with states
// encrypted by the passphrase the controller makes on its first start, and examples/local's
// NodePool; it returns the class's name.
func (h *harness) createNodeClass(ctx context.Context, t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "examples", "local", "nodeclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	server, err := url.Parse(cp.Server)
	if err != nil {
		t.Fatal(err)
	}
	filled := strings.NewReplacer("${MODULES}", filepath.Join(root, "modules"), "${SIM_DIR}", h.machines,
		"${API_SERVER}", server.Host).Replace(string(raw))
	nc := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(filled), &nc.Object); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedMap(nc.Object, map[string]any{"keySecretRef": map[string]any{
		"name": "fulfiller-state-encryption", "key": "passphrase"}}, "spec", "backend", "encryption"); err != nil {
		t.Fatal(err)
	}
	ncs := h.dyn.Resource(tofuNodeClassesGVR)
	if _, err := ncs.Create(ctx, nc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the example NodeClass: %v", err)
	}
	t.Cleanup(func() { _ = ncs.Delete(context.Background(), nc.GetName(), metav1.DeleteOptions{}) })
	applyYAML(ctx, t, h.dyn, filepath.Join(root, "examples", "local", "nodepool.yaml"), "karpenter.sh", "v1", "nodepools")
	return nc.GetName()
}

// waitNodeClassReady waits until the controller has made the class Ready (the module check,
// the join preflight's SubjectAccessReviews and reads of cluster-info and kubeadm's
// ConfigMaps, the status write).
func (h *harness) waitNodeClassReady(ctx context.Context, t *testing.T, c *controllerProc, name string) {
	t.Helper()
	var last string
	c.poll(ctx, t, "the example NodeClass to be Ready", time.Minute, func(ctx context.Context) (bool, error) {
		got, err := h.dyn.Resource(tofuNodeClassesGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Ready" {
				last = fmt.Sprintf("%v %v: %v", m["status"], m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
	t.Logf("nodeclass %s: Ready %s", name, last)
}

// uid is the UID of a cluster-scoped object.
func (h *harness) uid(ctx context.Context, t *testing.T, gvr schema.GroupVersionResource, name string) string {
	t.Helper()
	got, err := h.dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(got.GetUID())
}

// podNeedingANode is a pending pod for the example NodePool.
func podNeedingANode(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptrTo(int64(0)),
			NodeSelector:                  map[string]string{"karpenter.sh/nodepool": "sim"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("900m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			}}},
		},
	}
}

// claimNode takes one claim from a pending pod to a joined node with these rights: a
// NodeClaim, the Fulfillment, a bootstrap token in kube-system, tofu apply (a runner Job as
// the runner ServiceAccount), the machine joins, the token is revoked, the pod binds and the
// Fulfillment is Ready. It returns the claim's name.
func (h *harness) claimNode(ctx context.Context, t *testing.T, c *controllerProc, podName string) string {
	t.Helper()
	pod := podNeedingANode(podName)
	if _, err := h.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.cs.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))})
	})
	var nodeName string
	c.poll(ctx, t, "pod "+podName+" to be bound to a node the fulfiller made", 4*time.Minute, func(ctx context.Context) (bool, error) {
		got, err := h.cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		nodeName = got.Spec.NodeName
		return nodeName != "", nil
	})
	node, err := h.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim := node.Labels["karpenter.sh/nodeclaim"]
	if claim == "" {
		claim = nodeName
	}
	state, err := h.cs.CoreV1().Secrets(stateNS).Get(ctx, "tfstate-default-"+claim, metav1.GetOptions{})
	if err != nil {
		c.fail(t, "the runner's state of claim %s: %v", claim, err)
	}
	if plain := gunzip(t, state.Data["tfstate"]); !strings.Contains(plain, `"encrypted_data"`) {
		t.Errorf("the state of claim %s is not encrypted:\n%.300s", claim, plain)
	}
	c.poll(ctx, t, "the bootstrap token of claim "+claim+" to be revoked", time.Minute, func(ctx context.Context) (bool, error) {
		tokens, err := h.cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodeclaim=" + claim})
		return err == nil && len(tokens.Items) == 0, err
	})
	ffs := h.dyn.Resource(fulfillmentsGVR)
	c.poll(ctx, t, "the Fulfillment of claim "+claim+" to be Ready", time.Minute, func(ctx context.Context) (bool, error) {
		ff, err := ffs.Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(ff.Object, "status", "phase")
		return phase == "Ready", nil
	})
	t.Logf("claim %s: applied, joined as node %s", claim, nodeName)
	return claim
}

// destroyAll deletes the pods; consolidation then deletes the claims, tofu destroys the
// machines and the controller removes their states and locks.
func (h *harness) destroyAll(ctx context.Context, t *testing.T, c *controllerProc, pods []string, claims []string) {
	t.Helper()
	for _, pod := range pods {
		if err := h.cs.CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}
	ffs := h.dyn.Resource(fulfillmentsGVR)
	c.poll(ctx, t, "consolidation to destroy the machines and remove their states", 4*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := ffs.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) > 0 {
			return false, err
		}
		for _, claim := range claims {
			if _, err := h.cs.CoreV1().Secrets(stateNS).Get(ctx, "tfstate-default-"+claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, claim := range claims {
		if _, err := h.cs.CoordinationV1().Leases(stateNS).Get(ctx, "lock-tfstate-default-"+claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the lock Lease of claim %s is still there: %v", claim, err)
		}
	}
	if denied := forbiddenLines(c.logs.String()); len(denied) > 0 {
		t.Errorf("the controller was denied with the chart's RBAC:\n%s", strings.Join(denied, "\n"))
	}
	t.Logf("claims %v: destroyed and their states removed", claims)
}

var (
	fulfillmentsGVR    = schema.GroupVersionResource{Group: "fulfiller.sh", Version: "v1alpha1", Resource: "fulfillments"}
	tofuNodeClassesGVR = schema.GroupVersionResource{Group: "fulfiller.sh", Version: "v1alpha1", Resource: "tofunodeclasses"}
)

// fleet is what a claim has bought and keeps: an upgrade must leave it as it was.
type fleet struct {
	Fulfillments map[string]string // name: UID, spec, provider ID, phase and runs
	NodeClaims   map[string]string // name: UID and provider ID
	Nodes        map[string]string // name: UID
	States       map[string]string // state Secret: UID and resource version
	Jobs         []string          // runner Jobs
	Machines     []string          // simulated machines
}

func (h *harness) fleet(ctx context.Context, t *testing.T) fleet {
	t.Helper()
	f := fleet{Fulfillments: map[string]string{}, NodeClaims: map[string]string{}, Nodes: map[string]string{}, States: map[string]string{}}
	ffs, err := h.dyn.Resource(fulfillmentsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ff := range ffs.Items {
		spec, _ := json.Marshal(ff.Object["spec"])
		providerID, _, _ := unstructured.NestedString(ff.Object, "status", "providerID")
		phase, _, _ := unstructured.NestedString(ff.Object, "status", "phase")
		runs, _, _ := unstructured.NestedSlice(ff.Object, "status", "runs")
		var names []string
		for _, r := range runs {
			m, _ := r.(map[string]any)
			names = append(names, fmt.Sprintf("%v:%v", m["name"], m["phase"]))
		}
		f.Fulfillments[ff.GetName()] = fmt.Sprintf("uid=%s spec=%s providerID=%s phase=%s runs=%v", ff.GetUID(), spec, providerID, phase, names)
	}
	ncs, err := h.dyn.Resource(schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range ncs.Items {
		providerID, _, _ := unstructured.NestedString(nc.Object, "status", "providerID")
		f.NodeClaims[nc.GetName()] = fmt.Sprintf("uid=%s providerID=%s", nc.GetUID(), providerID)
	}
	nodes, err := h.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodepool"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		f.Nodes[n.Name] = string(n.UID)
	}
	states, err := h.cs.CoreV1().Secrets(stateNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states.Items {
		f.States[s.Name] = fmt.Sprintf("uid=%s rv=%s", s.UID, s.ResourceVersion)
	}
	jobs, err := h.cs.BatchV1().Jobs(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		f.Jobs = append(f.Jobs, j.Name)
	}
	entries, _ := os.ReadDir(h.machines)
	for _, e := range entries {
		f.Machines = append(f.Machines, e.Name())
	}
	slices.Sort(f.Jobs)
	return f
}

// forbiddenLines are the log lines with an API server's "is forbidden" (RBAC denial) error.
func forbiddenLines(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "is forbidden") {
			out = append(out, line)
		}
	}
	return out
}

// applyYAML creates the object in a YAML file with the admin's credentials.
func applyYAML(ctx context.Context, t *testing.T, dyn dynamic.Interface, path, group, version, resource string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(schema.GroupVersionResource{Group: group, Version: version, Resource: resource})
	if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s: %v", path, err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
}

// stopMachines stops simulated machines a failed test left running.
func stopMachines(t *testing.T, bin, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if out, err := exec.Command(bin, "sim", "stop", "--state-dir", filepath.Join(dir, e.Name())).CombinedOutput(); err != nil {
			t.Logf("stopping simulated machine %s: %v\n%s", e.Name(), err, out)
		}
	}
}

// serviceAccountKubeconfig writes a kubeconfig with a token of a release ServiceAccount.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, cs kubernetes.Interface, sa, dir string) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of %s: %v", sa, err)
	}
	path := filepath.Join(dir, sa+".kubeconfig")
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: cp.Server, CertificateAuthorityData: cp.CAPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{sa: {Token: tr.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: sa}},
		CurrentContext: "c",
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// startRunnerKubelet registers a node whose pods (the runner Jobs') run here as processes.
func startRunnerKubelet(ctx context.Context, t *testing.T, cs kubernetes.Interface, bin, dir string) {
	t.Helper()
	cert, key, err := cp.IssueServingCert([]net.IP{net.ParseIP("127.0.0.1")}, []string{"runner-node"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	k, err := kubelet.Start(ctx, kubelet.Config{
		Client:   cs,
		NodeName: "runner-node",
		Dir:      filepath.Join(dir, "kubelet"),
		Binaries: map[string]string{"fulfiller": bin},
		// The image's user (hack/image: user 65532:65532): runner pods must work as it.
		ImageUser: 65532, ImageGroup: 65532,
		APIServer:      strings.TrimPrefix(cp.Server, "https://"),
		ServingCertPEM: cert, ServingKeyPEM: key,
		ClientCAPEM: cp.CAPEM,
		Logf:        func(format string, args ...any) { fmt.Fprintf(logs, format+"\n", args...) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.Stop()
		if t.Failed() {
			t.Logf("stand-in kubelet log:\n%s", tail(logs.String(), 4000))
		}
	})
}

func gunzip(t *testing.T, data []byte) string {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the state is not gzip: %v", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
