// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/kubelet"
)

// runControllerAsChartInstalledIt runs the real `fulfiller controller` outside the cluster
// (there is no kubelet for the Deployment's pods) with the installed Deployment's environment
// and the controller ServiceAccount's token, so that it has exactly the chart's RBAC, and its
// tofu runs with the runner ServiceAccount's. It must become ready (every informer of
// Karpenter core and the fulfiller listed and synced), win leader election with the chart's
// Lease, make examples/local's TofuNodeClass Ready (module check, the join preflight's
// SubjectAccessReviews and cluster-info read, the status write), take one claim from a pending
// pod to a joined node and back to a destroyed machine with its state removed, and never be
// denied by the API server.
func runControllerAsChartInstalledIt(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	dir := t.TempDir()
	// The controller is the image's binary. Its runner Jobs run the image's `fulfiller run`;
	// the stand-in kubelet runs the development binary for it, whose `run` is the same command
	// and which also has the `sim` that modules/sim's provisioners call as $FULFILLER_BINARY.
	bin, devBin := filepath.Join(dir, "fulfiller"), filepath.Join(dir, "fulfiller-dev")
	build := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/fulfiller", "./cmd/fulfiller-dev")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fulfiller and fulfiller-dev: %v\n%s", err, out)
	}
	kubeconfig := serviceAccountKubeconfig(ctx, t, cs, "fulfiller", dir)

	dep, err := cs.AppsV1().Deployments(releaseNS).Get(ctx, "fulfiller", metav1.GetOptions{})
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
		"FULFILLER_RUNS_DIR": filepath.Join(dir, "runs"),
	}
	// The chart's Job executor: runner Jobs in the release namespace, run by a stand-in
	// kubelet with the development binary for the image's and the pod's service-account token
	// (the runner ServiceAccount's) for the kubernetes backend.
	extra := map[string]string{"FULFILLER_TOFU": tofu}
	startRunnerKubelet(ctx, t, cs, devBin, dir)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "KUBECONFIG=" + kubeconfig}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			continue // MEMORY_LIMIT, CPU_REQUESTS: from the pod's resources
		}
		if v, ok := overrides[e.Name]; ok {
			e.Value = v
		}
		env = append(env, e.Name+"="+e.Value)
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	logs := &testenv.SyncBuffer{}
	cmd := exec.Command(bin, dep.Spec.Template.Spec.Containers[0].Args...)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = env, logs, logs, dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\ncontroller log (tail):\n%s", fmt.Sprintf(format, args...), tail(logs.String(), 4000))
	}
	poll := func(what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := wait.PollUntilContextCancel(pctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			select {
			case err := <-exited:
				return false, fmt.Errorf("the controller exited: %v", err)
			default:
			}
			if denied := forbiddenLines(logs.String()); len(denied) > 0 {
				return false, fmt.Errorf("the controller was denied with the chart's RBAC:\n%s", strings.Join(denied, "\n"))
			}
			return cond(ctx)
		})
		if err != nil {
			fail("waiting for %s: %v", what, err)
		}
	}

	readyz := "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/readyz"
	poll("the controller's /readyz", 2*time.Minute, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	poll("the leader election Lease", time.Minute, func(ctx context.Context) (bool, error) {
		lease, err := cs.CoordinationV1().Leases(releaseNS).Get(ctx, "fulfiller-leader-election", metav1.GetOptions{})
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	})

	// examples/local's NodeClass, as `make demo` fills it in.
	raw, err := os.ReadFile(filepath.Join(root, "examples", "local", "nodeclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	server, err := url.Parse(cp.Server)
	if err != nil {
		t.Fatal(err)
	}
	filled := strings.NewReplacer("${MODULES}", filepath.Join(root, "modules"), "${SIM_DIR}", filepath.Join(dir, "machines"),
		"${API_SERVER}", server.Host).Replace(string(raw))
	nc := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(filled), &nc.Object); err != nil {
		t.Fatal(err)
	}
	// States encrypted with the passphrase the controller made on its first start.
	if err := unstructured.SetNestedMap(nc.Object, map[string]any{"keySecretRef": map[string]any{
		"name": "fulfiller-state-encryption", "key": "passphrase"}}, "spec", "backend", "encryption"); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cp.Config)
	ncs := dyn.Resource(schema.GroupVersionResource{Group: "fulfiller.sh", Version: "v1alpha1", Resource: "tofunodeclasses"})
	if _, err := ncs.Create(ctx, nc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the example NodeClass: %v", err)
	}
	t.Cleanup(func() { _ = ncs.Delete(context.Background(), nc.GetName(), metav1.DeleteOptions{}) })
	var last string
	poll("the example NodeClass to be Ready", time.Minute, func(ctx context.Context) (bool, error) {
		got, err := ncs.Get(ctx, nc.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				last = fmt.Sprintf("%v %v: %v", m["status"], m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
	t.Logf("nodeclass %s: Ready %s", nc.GetName(), last)
	t.Cleanup(func() { stopMachines(t, devBin, filepath.Join(dir, "machines")) })

	// One claim through its whole life with these rights: a pending pod, a NodeClaim, the
	// Fulfillment, a bootstrap token in kube-system, tofu apply (as the runner
	// ServiceAccount: FULFILLER_RUNNER_KUBECONFIG), the machine joins, the token is revoked,
	// the pod binds; then the pod goes, consolidation deletes the claim, tofu destroys the
	// machine and the controller removes its state.
	applyYAML(ctx, t, dyn, filepath.Join(root, "examples", "local", "nodepool.yaml"), "karpenter.sh", "v1", "nodepools")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "needs-a-node", Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptrTo(int64(0)),
			NodeSelector:                  map[string]string{"karpenter.sh/nodepool": "sim"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("900m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			}}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var nodeName string
	poll("the pod to be bound to a node the fulfiller made", 4*time.Minute, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		nodeName = got.Spec.NodeName
		return nodeName != "", nil
	})
	node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim := node.Labels["karpenter.sh/nodeclaim"]
	if claim == "" {
		claim = nodeName
	}
	state, err := cs.CoreV1().Secrets(stateNS).Get(ctx, "tfstate-default-"+claim, metav1.GetOptions{})
	if err != nil {
		fail("the runner's state of claim %s: %v", claim, err)
	}
	if plain := gunzip(t, state.Data["tfstate"]); !strings.Contains(plain, `"encrypted_data"`) {
		t.Errorf("the state of claim %s is not encrypted:\n%.300s", claim, plain)
	}
	poll("the claim's bootstrap token to be revoked", time.Minute, func(ctx context.Context) (bool, error) {
		tokens, err := cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodeclaim=" + claim})
		return err == nil && len(tokens.Items) == 0, err
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	ffs := dyn.Resource(schema.GroupVersionResource{Group: "fulfiller.sh", Version: "v1alpha1", Resource: "fulfillments"})
	poll("consolidation to destroy the machine and remove its state", 4*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := ffs.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) > 0 {
			return false, err
		}
		_, err = cs.CoreV1().Secrets(stateNS).Get(ctx, "tfstate-default-"+claim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if _, err := cs.CoordinationV1().Leases(stateNS).Get(ctx, "lock-tfstate-default-"+claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the lock Lease of claim %s is still there: %v", claim, err)
	}
	t.Logf("claim %s: applied, joined as node %s, destroyed and its state removed", claim, nodeName)

	if denied := forbiddenLines(logs.String()); len(denied) > 0 {
		t.Errorf("the controller was denied with the chart's RBAC:\n%s", strings.Join(denied, "\n"))
	}
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
