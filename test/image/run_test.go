// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestRunInImage runs a claim of modules/sim through `fulfiller run` in the image, as a
// runner Job does: the image's fulfiller, tofu and provider mirror, and the kubernetes state
// backend of the test's API server, which the run reaches through a network namespace whose
// only way out is that server's address. The apply records the state in the API server, the
// destroy removes the simulated machine again.
//
// modules/sim is the simulated cloud: its provisioners run a shell, mkdir, rm and the
// simulated machine (fulfiller-sim), none of which the image ships, so the test adds them to
// the unpacked root file system (Debian's static busybox and a static fulfiller-sim built
// here), as a real cloud would be reached through its provider instead.
func TestRunInImage(t *testing.T) {
	fs := rootfs(t)
	addSimCloud(t, fs)
	cp := testenv.StartT(t, testenv.Options{})
	server, err := url.Parse(cp.Server)
	if err != nil {
		t.Fatal(err)
	}
	ns := newNetNS(t, server.Host)
	dir := runDir(t, fs, cp)

	const name = "image-run"
	key := statelock.Key(name)
	request := func(op tfrunner.Operation) tfrunner.Request {
		return tfrunner.Request{
			Name: name + "-" + string(op), Operation: op, ModuleDir: "/modules/sim", WorkDir: "/tmp/run/work-" + string(op),
			Backend: tfrunner.Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(key, "default")},
			Variables: map[string]any{
				"node_name": name, "node_type": "image", "zone": "sim-a", "user_data": "#cloud-config\n",
				"labels":     map[string]string{},
				"parameters": map[string]string{"sim_dir": "/tmp/run/machines", "never_join": "true"},
			},
			Env:      map[string]string{"KUBE_CONFIG_PATH": "/tmp/run/kubeconfig"},
			TofuPath: "/usr/local/bin/tofu",
		}
	}
	run := func(op tfrunner.Operation) tfrunner.Result {
		t.Helper()
		return runInImage(t, fs, ns, dir, request(op))
	}

	applied := run(tfrunner.Apply)
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			run(tfrunner.Destroy)
		}
	})
	if !strings.HasPrefix(applied.ProviderID, "sim://") || applied.NodeName != name {
		t.Errorf("apply in the image: provider ID %q, node %q; want sim://… and %s", applied.ProviderID, applied.NodeName, name)
	}
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	ctx := context.Background()
	secret, err := cs.CoreV1().Secrets("default").Get(ctx, key.SecretName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the run's state in the API server: %v", err)
	}
	if len(secret.Data["tfstate"]) == 0 {
		t.Errorf("state secret %s holds no tfstate", secret.Name)
	}
	if _, err := os.Stat(filepath.Join(dir, "machines", name)); err != nil {
		t.Errorf("the simulated machine's state: %v", err)
	}

	run(tfrunner.Destroy)
	destroyed = true
	if _, err := os.Stat(filepath.Join(dir, "machines", name)); !os.IsNotExist(err) {
		t.Errorf("the simulated machine is still there after the destroy: %v", err)
	}
	secret, err = cs.CoreV1().Secrets("default").Get(ctx, key.SecretName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Resources []json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(gunzipState(t, secret.Data["tfstate"]), &state); err != nil {
		t.Fatal(err)
	}
	if len(state.Resources) != 0 {
		t.Errorf("the state after the destroy holds %d resources", len(state.Resources))
	}
}

// runDir makes the image's /tmp/run, where runInImage's requests and results go, with the
// control plane's kubeconfig as /tmp/run/kubeconfig, and returns its path outside the image.
func runDir(t *testing.T, rootfs string, cp *testenv.ControlPlane) string {
	t.Helper()
	dir := filepath.Join(rootfs, "tmp", "run")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runInImage runs req through `fulfiller run` in the image, in ns, as a runner Job does; dir
// is the image's /tmp/run, which holds the request and the result. It fails the test unless
// the run succeeded, with the run's log.
func runInImage(t *testing.T, rootfs string, ns *netNS, dir string, req tfrunner.Request) tfrunner.Result {
	t.Helper()
	op := string(req.Operation)
	reqFile := "request-" + op + ".json"
	if err := tfrunner.WriteRequest(filepath.Join(dir, reqFile), req); err != nil {
		t.Fatal(err)
	}
	uid, gid := imageUser()
	if err := chownTree(dir, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	var log testenv.SyncBuffer
	cmd := imageCmd(rootfs, "/tmp/run", nil, "/usr/local/bin/fulfiller", "run", "--request", "/tmp/run/"+reqFile,
		"--result", "/tmp/run/result-"+op+".json")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := ns.start(cmd); err != nil {
		t.Fatal(err)
	}
	waitErr := cmd.Wait()
	res, err := tfrunner.ReadResult(filepath.Join(dir, "result-"+op+".json"))
	if err != nil || waitErr != nil || !res.Succeeded {
		t.Fatalf("fulfiller run (%s) in the image: %v, %v, %+v\nrun log:\n%s", op, waitErr, err, res.Error, log.String())
	}
	return res
}

// addSimCloud adds what modules/sim's provisioners run to the unpacked image: a static
// shell with the commands they use, and the simulated machine beside the fulfiller, where
// the module looks for it.
func addSimCloud(t *testing.T, rootfs string) {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("modules/sim needs a static shell in the image: install Debian's busybox-static (.ci/run does)")
	}
	if out, err := exec.Command("file", "-L", busybox).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
		t.Fatalf("%s is not statically linked: %s", busybox, out)
	}
	bin := filepath.Join(rootfs, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", busybox, filepath.Join(bin, "busybox")).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, applet := range []string{"sh", "mkdir", "rm", "sleep", "cat"} {
		if err := os.Symlink("busybox", filepath.Join(bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(rootfs, "usr", "local", "bin", "fulfiller-sim"), "./cmd/fulfiller-sim")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fulfiller-sim: %v\n%s", err, out)
	}
}

// gunzipState reads the kubernetes backend's tfstate value, which it stores gzipped.
func gunzipState(t *testing.T, data []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the state secret's tfstate is not gzipped: %v", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
