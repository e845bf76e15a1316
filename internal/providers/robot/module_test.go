// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot_test

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/crypto/ssh"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/standin"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// testMainEnv makes the test binary act as `fulfiller robot` for the module's provisioners
// (the runner exports this executable as FULFILLER_BINARY).
const testMainEnv = "ROBOT_MODULE_TEST_MAIN"

var controlPlane *testenv.ControlPlane

func TestMain(m *testing.M) {
	if os.Getenv(testMainEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "robot" {
		os.Exit(robot.Main(os.Args[2:]))
	}
	os.Exit(testenv.RunMain(m, &controlPlane, testenv.Options{CRDs: testenv.DefaultCRDs()}))
}

// fastTimings are a real server's, 600 times faster: a 20-minute install takes 2 seconds.
var fastTimings = func() standin.Timings {
	t := standin.RealTimings.Scale(600)
	t.HeartbeatInterval = 2 * time.Second
	return t
}()

// pool is one test's Robot account, servers, SSH key and inventory namespace.
type pool struct {
	api       *standin.API
	signer    ssh.Signer
	keyPEM    string
	namespace string
	inv       statelock.LeasePool
	cs        kubernetes.Interface
}

func newPool(t *testing.T, namespace string) *pool {
	t.Helper()
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(controlPlane.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(controlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	signer, keyPEM := newSSHKeyPEM(t)
	return &pool{
		api: startAPI(t, nil), signer: signer, keyPEM: keyPEM, namespace: namespace, cs: cs,
		inv: statelock.LeasePool{Reader: c, Writer: c, Namespace: namespace, Pool: robot.InventoryPool},
	}
}

func newSSHKeyPEM(t *testing.T) (ssh.Signer, string) {
	t.Helper()
	priv, pub, err := robot.NewHostKey() // an ed25519 key in OpenSSH PEM, as a class's Secret holds
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(priv)
	if err != nil || string(signer.PublicKey().Marshal()) != string(pub.Marshal()) {
		t.Fatalf("parsing the client key: %v", err)
	}
	if block, _ := pem.Decode(priv); block == nil {
		t.Fatal("the client key is not PEM")
	}
	return signer, string(priv)
}

// server adds a server to the account and its lease to the inventory; standby installs a
// warm standby and records its host key, as the pool keeper does.
func (p *pool) server(t *testing.T, number int, standby bool) *standin.Server {
	t.Helper()
	s := addServer(t, p.api, standin.ServerConfig{
		Number: number, Name: "pool-" + strconv.Itoa(number), Product: "AX52", DC: "FSN1-DC1", Timings: fastTimings,
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")},
	})
	id := strconv.Itoa(number)
	if err := p.inv.Ensure(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if standby {
		key, err := s.InstallStandby(p.signer.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if err := p.inv.SetAttributes(context.Background(), id, "", map[string]string{robot.AttrHostKey: robot.FormatHostKey(key), robot.AttrState: robot.StateStandby}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// lease leases server number to a claim, as the controller will, and returns the holder.
func (p *pool) lease(t *testing.T, claim string, number int) (string, statelock.Item) {
	t.Helper()
	holder := statelock.LeaseHolder(claim, "uid-"+claim)
	id := strconv.Itoa(number)
	if err := p.inv.Acquire(context.Background(), id, holder); err != nil {
		t.Fatal(err)
	}
	it, err := p.inv.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return holder, it
}

// userData is a real join for node name with provider ID hrobot://<number>.
func (p *pool) userData(t *testing.T, name string, number int) (string, bootstrap.Token) {
	t.Helper()
	tok, err := testenv.MintToken(context.Background(), p.cs, time.Now().Add(15*time.Minute), "robot module "+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bootstrap.CACertHash(controlPlane.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	data, err := bootstrap.RenderUserData(bootstrap.JoinSpec{
		// A stock image, as the controller renders for the default bootstrap.install.
		Install:           bootstrap.Install{Packages: true, KubernetesVersion: "v1.36.3"},
		APIServerEndpoint: strings.TrimPrefix(controlPlane.Server, "https://"),
		Token:             tok, CACertHash: hash, NodeName: name, ProviderID: "hrobot://" + strconv.Itoa(number),
		Labels: map[string]string{"node.kubernetes.io/instance-type": "ax52"},
		Taints: []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(data), tok
}

// request is one run of modules/hetzner-robot through the runner, with the kubernetes state
// backend and the class's credentials in the environment.
func (p *pool) request(t *testing.T, name string, op tfrunner.Operation, s *standin.Server, userData string, params map[string]string) tfrunner.Request {
	t.Helper()
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	module, err := filepath.Abs(filepath.Join("..", "..", "..", "modules", "hetzner-robot"))
	if err != nil {
		t.Fatal(err)
	}
	par := map[string]string{
		"ssh_host": "127.0.0.1", "ssh_port": strconv.Itoa(s.SSHPort()), "server_ip": s.IP(),
		"image": testImage, "inventory_namespace": p.namespace,
		"rescue_timeout": "1m", "install_timeout": "2m", "warm_timeout": "30s", "poll_interval": "100ms",
	}
	for k, v := range params {
		par[k] = v
	}
	return tfrunner.Request{
		Name: name + "-" + string(op), Operation: op, Family: v1alpha1.FamilyRobot, ModuleDir: module, WorkDir: t.TempDir(),
		Backend: tfrunner.Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(statelock.Key(name), "default")},
		Variables: map[string]any{
			tfrunner.VarNodeName: name, tfrunner.VarNodeType: "ax52", tfrunner.VarZone: "fsn1",
			tfrunner.VarUserData: userData, tfrunner.VarLabels: map[string]string{}, tfrunner.VarParameters: par,
		},
		Env: map[string]string{
			"KUBE_CONFIG_PATH": controlPlane.Kubeconfig, testMainEnv: "1",
			robot.EnvEndpoint: p.api.URL, robot.EnvUser: apiUser, robot.EnvPassword: apiPassword, robot.EnvSSHKey: p.keyPEM,
		},
		TofuPath: tofu,
	}
}

// run runs req and checks that no secret reached the log or the error.
func (p *pool) run(t *testing.T, req tfrunner.Request, secrets ...string) (tfrunner.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log testenv.SyncBuffer
	res := tfrunner.Run(ctx, req, &log, tfrunner.RuleSet{v1alpha1.FamilyRobot: robotrules.Rules{}})
	out := log.String()
	for _, s := range append(secrets, apiPassword, p.keyPEM) {
		if strings.Contains(out, s) || (res.Error != nil && strings.Contains(res.Error.Message, s)) {
			t.Errorf("the %s log or error shows a secret", req.Operation)
		}
	}
	return res, out
}

// robotClass classifies a failed run as the family's rules will in the runner: from the
// error diagnostics in its log.
func robotClass(t *testing.T, log string) (tfrunner.ErrorClass, string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var msg struct {
			Type       string               `json:"type"`
			Diagnostic *tfrunner.Diagnostic `json:"diagnostic"`
		}
		if json.Unmarshal(sc.Bytes(), &msg) != nil || msg.Diagnostic == nil || msg.Diagnostic.Severity != "error" {
			continue
		}
		if class, ok := (robotrules.Rules{}).Classify(*msg.Diagnostic); ok {
			reason, _ := robotrules.ReasonOf(msg.Diagnostic.Detail)
			return class, reason
		}
	}
	t.Fatalf("no diagnostic of `fulfiller robot` in the log:\n%s", log)
	return "", ""
}

func waitNode(t *testing.T, cs kubernetes.Interface, name, providerID string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			if n.Spec.ProviderID != providerID {
				t.Fatalf("node %s has provider ID %q, want %q", name, n.Spec.ProviderID, providerID)
			}
			return time.Since(start)
		}
		if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if time.Since(start) > timeout {
			t.Fatalf("node %s did not register within %s", name, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Warm: a standby server joins within seconds of the apply, with the recorded host key
// pinned. Destroy releases it: the reinstall runs on the server after the runner returned,
// with a new host key recorded first, and the server comes back to standby.
func TestModuleWarmActivationAndRelease(t *testing.T) {
	t.Parallel()
	p := newPool(t, "robot-warm")
	srv := p.server(t, 321, true)
	const name = "robot-warm-a"
	holder, item := p.lease(t, name, 321)
	userData, tok := p.userData(t, name, 321)
	params := map[string]string{"server_number": "321", "activation_path": "warm", "host_key": item.Attributes[robot.AttrHostKey], "lease_holder": holder}

	testenv.Eventually(t, 30*time.Second, "the standby server to boot", func() bool { _, up := srv.State(); return up })
	start := time.Now()
	res, log := p.run(t, p.request(t, name, tfrunner.Apply, srv, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("apply: %+v\n%s", res.Error, log)
	}
	if res.ProviderID != "hrobot://321" || res.NodeName != name || len(res.Addresses) != 1 || res.Addresses[0] != "127.0.0.1" {
		t.Errorf("outputs: %q %q %v", res.ProviderID, res.NodeName, res.Addresses)
	}
	waitNode(t, p.cs, name, "hrobot://321", 60*time.Second)
	t.Logf("warm activation: apply to Node registered in %s", time.Since(start).Round(10*time.Millisecond))
	if it, _ := p.inv.Get(context.Background(), "321"); it.Attributes[robot.AttrState] != robot.StateActive || it.Holder != holder {
		t.Errorf("inventory after activation: %+v", it)
	}

	res, log = p.run(t, p.request(t, name, tfrunner.Destroy, srv, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("destroy: %+v\n%s", res.Error, log)
	}
	it, err := p.inv.Get(context.Background(), "321")
	if err != nil || it.Attributes[robot.AttrState] != robot.StateReinstalling || it.Attributes[robot.AttrHostKey] == item.Attributes[robot.AttrHostKey] {
		t.Fatalf("inventory right after destroy: %+v, %v", it, err)
	}
	// The controller releases the lease and removes the state; the keeper waits for standby.
	if err := p.inv.Release(context.Background(), "321", holder, nil); err != nil {
		t.Fatal(err)
	}
	if err := (statelock.KubernetesStore{Reader: p.inv.Reader, Writer: p.inv.Writer, Namespace: "default"}).Remove(context.Background(), statelock.Key(name)); err != nil {
		t.Fatal(err)
	}
	keeper := &robot.Activator{Client: newClient(t, p.api, nil), Signer: p.signer, SSHHost: "127.0.0.1", SSHPort: srv.SSHPort()}
	testenv.Eventually(t, 60*time.Second, "the server to reinstall and return to standby", func() bool {
		state, err := keeper.Probe(context.Background(), 321, it.Attributes[robot.AttrHostKey])
		return err == nil && state == robot.StateStandby
	})
	if got := robot.FormatHostKey(srv.HostKey()); got != it.Attributes[robot.AttrHostKey] {
		t.Errorf("the reinstalled server presents %s, the recorded key is %s", got, it.Attributes[robot.AttrHostKey])
	}
	if it, _ := p.inv.Get(context.Background(), "321"); !it.Free() {
		t.Errorf("the server after release is not free: %+v", it)
	}
	if ok, err := statelock.Exists(context.Background(), p.inv.Reader, "default", statelock.Key(name)); ok || err != nil {
		t.Errorf("the state is left: %v, %v", ok, err)
	}
}

// Cold: rescue, reset, installimage with the cloud-init seed (20 minutes scaled to 2
// seconds), reboot; the installed system's host key is recorded and cloud-init joins it.
// A failed installimage is a classified, precise error.
func TestModuleColdActivation(t *testing.T) {
	t.Parallel()
	p := newPool(t, "robot-cold")
	srv := p.server(t, 421, false)
	const name = "robot-cold-a"
	holder, _ := p.lease(t, name, 421)
	params := map[string]string{"server_number": "421", "activation_path": "cold", "lease_holder": holder}

	// The first install fails: the run fails as InstallFailed, insufficient capacity for
	// this server.
	srv.FailInstalls(1)
	userData, tok := p.userData(t, name, 421)
	res, log := p.run(t, p.request(t, name, tfrunner.Apply, srv, userData, params), tok.Secret)
	if res.Succeeded {
		t.Fatal("an apply whose installimage fails succeeded")
	}
	if class, reason := robotClass(t, log); class != tfrunner.Capacity || reason != robotrules.ReasonInstallFailed || !strings.Contains(res.Error.Message, "installimage") {
		t.Errorf("failed install: class %s, reason %s, message %q", class, reason, res.Error.Message)
	}

	start := time.Now()
	res, log = p.run(t, p.request(t, name, tfrunner.Apply, srv, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("apply: %+v\n%s", res.Error, log)
	}
	waitNode(t, p.cs, name, "hrobot://421", 60*time.Second)
	t.Logf("cold activation (install %s, boots %s): apply to Node registered in %s", fastTimings.Install, fastTimings.Boot, time.Since(start).Round(10*time.Millisecond))
	it, err := p.inv.Get(context.Background(), "421")
	if err != nil || it.Attributes[robot.AttrHostKey] != robot.FormatHostKey(srv.HostKey()) || it.Attributes[robot.AttrState] != robot.StateActive {
		t.Errorf("inventory after a cold activation: %+v, %v (server presents %s)", it, err, robot.FormatHostKey(srv.HostKey()))
	}
}

// Bad input: wrong credentials, an unknown server, a server whose host key changed, a server
// not in standby. Each is a precise error with its reason, and nothing is installed.
func TestModuleBadInput(t *testing.T) {
	t.Parallel()
	p := newPool(t, "robot-bad")
	srv := p.server(t, 521, true)
	used := p.server(t, 522, true)
	usedHolder, usedItem := p.lease(t, "robot-bad-b", 522)
	holder, item := p.lease(t, "robot-bad-a", 521)
	hostKey := item.Attributes[robot.AttrHostKey]
	testenv.Eventually(t, 30*time.Second, "the standby servers to boot", func() bool {
		_, up := srv.State()
		_, upToo := used.State()
		return up && upToo
	})
	used.UseOutsidePool()
	usedEvents := len(used.Events())
	base := map[string]string{"server_number": "521", "activation_path": "warm", "host_key": hostKey, "lease_holder": holder}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		m[k] = v
		return m
	}

	cases := []struct {
		name      string
		server    *standin.Server
		params    map[string]string
		env       map[string]string
		before    func()
		class     tfrunner.ErrorClass
		reason    string
		inMessage []string
	}{
		{name: "robot-bad-creds", params: base, env: map[string]string{robot.EnvPassword: "not the password"},
			class: tfrunner.Credentials, reason: robotrules.ReasonInvalidCredentials, inMessage: []string{"UNAUTHORIZED", "401"}},
		{name: "robot-bad-server", params: with("server_number", "999"),
			class: tfrunner.InvalidModule, reason: robotrules.ReasonServerNotFound, inMessage: []string{"SERVER_NOT_FOUND", "999"}},
		{name: "robot-bad-used", server: used, params: map[string]string{"server_number": "522", "activation_path": "warm", "host_key": usedItem.Attributes[robot.AttrHostKey], "lease_holder": usedHolder},
			class: tfrunner.Capacity, reason: robotrules.ReasonNotStandby, inMessage: []string{"not in standby", "522"}},
		{name: "robot-bad-hostkey", params: base, before: func() {
			if err := srv.ReplaceHostKey(); err != nil {
				t.Fatal(err)
			}
		}, class: tfrunner.Capacity, reason: robotrules.ReasonHostKeyMismatch, inMessage: []string{"host key", "changed", ssh.FingerprintSHA256(mustKey(t, hostKey))}},
	}
	for _, tc := range cases {
		if tc.before != nil {
			tc.before()
		}
		target := srv
		if tc.server != nil {
			target = tc.server
		}
		userData, tok := p.userData(t, tc.name, target.Number())
		req := p.request(t, tc.name, tfrunner.Apply, target, userData, tc.params)
		for k, v := range tc.env {
			req.Env[k] = v
		}
		res, log := p.run(t, req, tok.Secret)
		if res.Succeeded {
			t.Errorf("%s: apply succeeded", tc.name)
			continue
		}
		class, reason := robotClass(t, log)
		if class != tc.class || reason != tc.reason || res.Error.Class != tc.class {
			t.Errorf("%s: class %s reason %s, want %s %s (%s)", tc.name, class, reason, tc.class, tc.reason, res.Error.Message)
		}
		for _, s := range tc.inMessage {
			if !strings.Contains(res.Error.Message, s) {
				t.Errorf("%s: message %q does not say %q", tc.name, res.Error.Message, s)
			}
		}
		if state, _ := srv.State(); state != robot.StateStandby {
			t.Errorf("%s: the server left standby: %s", tc.name, state)
		}
		if tc.server != nil && len(tc.server.Events()) != usedEvents {
			t.Errorf("%s: the server in use was touched: %v", tc.name, tc.server.Events())
		}
	}
	// The generic rules already see wrong credentials in the Robot code.
	if c := tfrunner.Classify([]tfrunner.Diagnostic{{Severity: "error", Summary: "local-exec provisioner error",
		Detail: "Error running command 'x': exit status 1. Output: robot error InvalidCredentials: GET /server/{server-number}: robot webservice: UNAUTHORIZED (HTTP 401): Unable to authenticate"}}, nil, nil); c.Class != tfrunner.Credentials {
		t.Errorf("generic classification of wrong credentials: %s", c.Class)
	}
}

func mustKey(t *testing.T, s string) ssh.PublicKey {
	t.Helper()
	k, err := robot.ParseHostKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
