// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package image

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/standin"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestRobotInImage runs modules/hetzner-robot as shipped in the image, which has no shell:
// a warm activation of a standby server and its release, through `fulfiller run` in the
// image, reaching only the test's API server (the state backend), the Robot webservice
// stand-in and the server's SSH. The module's provisioners run `fulfiller robot` by name.
func TestRobotInImage(t *testing.T) {
	fs := rootfs(t)
	for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"} {
		if _, err := os.Lstat(filepath.Join(fs, shell)); !os.IsNotExist(err) {
			t.Fatalf("the image has /%s (%v); this test shows the module needs no shell", shell, err)
		}
	}
	cp := testenv.StartT(t, testenv.Options{})
	server, err := url.Parse(cp.Server)
	if err != nil {
		t.Fatal(err)
	}

	const user, password, image = "robot-user", "robot-password", "/root/.oldroot/nfs/images/Ubuntu-2404-noble-amd64-base.tar.gz"
	api, err := standin.StartAPI(standin.APIConfig{User: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	timings := standin.RealTimings.Scale(600)
	timings.HeartbeatInterval = 2 * time.Second
	srv, err := standin.NewServer(standin.ServerConfig{
		Number: 361, Name: "pool-361", Product: "AX52", DC: "FSN1-DC1", Timings: timings,
		Images: []string{image}, StateDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	api.AddServer(srv)
	keyPEM, pub, err := robot.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := srv.InstallStandby(signer.PublicKey())
	if err != nil || string(signer.PublicKey().Marshal()) != string(pub.Marshal()) {
		t.Fatalf("installing the standby: %v", err)
	}
	// The server's inventory lease, as the pool keeper records a standby and the controller
	// leases it to the claim: the release records the reinstall's host key and state on it.
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inv := statelock.LeasePool{Reader: c, Writer: c, Namespace: "default", Pool: robot.InventoryPool}
	holder := statelock.LeaseHolder("image-robot", "uid-image-robot")
	if err := inv.Ensure(ctx, "361"); err != nil {
		t.Fatal(err)
	}
	if err := inv.SetAttributes(ctx, "361", "", map[string]string{robot.AttrHostKey: robot.FormatHostKey(hostKey), robot.AttrState: robot.StateStandby}); err != nil {
		t.Fatal(err)
	}
	if err := inv.Acquire(ctx, "361", holder); err != nil {
		t.Fatal(err)
	}
	webservice, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	sshAddr := "127.0.0.1:" + strconv.Itoa(srv.SSHPort())
	ns := newNetNS(t, server.Host, webservice.Host, sshAddr)
	testenv.Eventually(t, 30*time.Second, "the standby server to boot", func() bool { _, up := srv.State(); return up })

	dir := runDir(t, fs, cp)
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	tok, err := testenv.MintToken(ctx, cs, time.Now().Add(15*time.Minute), "robot in the image")
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bootstrap.CACertHash(cp.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	const name = "image-robot"
	userData, err := bootstrap.RenderUserData(bootstrap.JoinSpec{
		Install:           bootstrap.Install{Packages: true, KubernetesVersion: "v1.36.3"},
		APIServerEndpoint: server.Host, Token: tok, CACertHash: hash, NodeName: name, ProviderID: "hrobot://361",
		Taints: []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}},
	})
	if err != nil {
		t.Fatal(err)
	}

	request := func(op tfrunner.Operation) tfrunner.Request {
		return tfrunner.Request{
			Name: name + "-" + string(op), Operation: op, Family: v1alpha1.FamilyRobot,
			ModuleDir: "/modules/hetzner-robot", WorkDir: "/tmp/run/work-" + string(op),
			Backend: tfrunner.Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(statelock.Key(name), "default")},
			Variables: map[string]any{
				tfrunner.VarNodeName: name, tfrunner.VarNodeType: "ax52", tfrunner.VarZone: "fsn1",
				tfrunner.VarUserData: string(userData), tfrunner.VarLabels: map[string]string{},
				tfrunner.VarParameters: map[string]string{
					"server_number": "361", "activation_path": "warm", "host_key": robot.FormatHostKey(hostKey),
					"ssh_host": "127.0.0.1", "ssh_port": strconv.Itoa(srv.SSHPort()), "server_ip": srv.IP(), "image": image,
					"inventory_namespace": "default", "lease_holder": holder,
					"rescue_timeout": "1m", "warm_timeout": "30s", "poll_interval": "100ms",
				},
			},
			Env: map[string]string{
				"KUBE_CONFIG_PATH": "/tmp/run/kubeconfig",
				robot.EnvEndpoint:  api.URL, robot.EnvUser: user, robot.EnvPassword: password, robot.EnvSSHKey: string(keyPEM),
			},
			TofuPath: "/usr/local/bin/tofu",
		}
	}

	applied := runInImage(t, fs, ns, dir, request(tfrunner.Apply))
	if applied.ProviderID != "hrobot://361" || applied.NodeName != name {
		t.Errorf("apply in the image: provider ID %q, node %q; want hrobot://361 and %s", applied.ProviderID, applied.NodeName, name)
	}
	if state, _ := srv.State(); state != robot.StateActive {
		t.Errorf("the server after the warm activation: %q, want active", state)
	}
	if calls := api.ServerCalls(361); slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "POST ") }) {
		t.Errorf("a warm activation changed the server through the webservice: %q", calls)
	}
	if _, err := os.Stat(filepath.Join(dir, "work-apply", "module", ".robot-user-data")); !os.IsNotExist(err) {
		t.Errorf("the user data's file is left in the run's folder: %v", err)
	}

	runInImage(t, fs, ns, dir, request(tfrunner.Destroy))
	calls := api.ServerCalls(361)
	for _, want := range []string{"POST /boot/{server-number}/rescue", "POST /reset/{server-number}"} {
		if !slices.Contains(calls, want) {
			t.Errorf("the release in the image did not call %s: %q", want, calls)
		}
	}
	it, err := inv.Get(ctx, "361")
	if err != nil || it.Attributes[robot.AttrState] != robot.StateReinstalling || it.Attributes[robot.AttrHostKey] == robot.FormatHostKey(hostKey) {
		t.Errorf("the server's lease after the release: %+v, %v; want reinstalling with a new host key", it.Attributes, err)
	}
	testenv.Eventually(t, 60*time.Second, "the released server to reinstall as a standby", func() bool {
		state, up := srv.State()
		return up && state == robot.StateStandby
	})
}
