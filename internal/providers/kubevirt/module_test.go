// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt/standin"
	"github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt/standin/crds"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// testMainEnv makes the test binary act as `fulfiller sim` for the simulated guests.
const testMainEnv = "KUBEVIRT_MODULE_TEST_MAIN"

var controlPlane *testenv.ControlPlane

// moduleCache is the module cache the runs share, as a local executor's runs with the runner
// shortcuts do (tfrunner.Request.Shortcuts): the kubectl
// provider is installed once into it and read by every run.
var moduleCache string

func TestMain(m *testing.M) {
	if os.Getenv(testMainEnv) == "1" {
		args := os.Args[1:]
		if len(args) > 0 && args[0] == "sim" {
			args = args[1:]
		}
		os.Exit(sim.Main(args))
	}
	os.Setenv(testMainEnv, "1")
	dir, err := os.MkdirTemp("", "kubevirt-module-cache-")
	if err != nil {
		panic(err)
	}
	moduleCache = dir
	code := testenv.RunMain(m, &controlPlane, testenv.Options{CRDs: append(testenv.DefaultCRDs(), crds.CRDs()...)})
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const (
	bootImage = "quay.io/containerdisks/ubuntu:24.04"
	// infraSA is the infra cluster's service account the class's credentials belong to.
	infraSA = "fulfiller"
)

// infra is an infra namespace with a service account that may manage VMs and Secrets there
// and nowhere else, and the credentials the class's Secret would hold for it.
type infra struct {
	namespace string
	env       map[string]string
}

func newInfra(t *testing.T, cs kubernetes.Interface, namespace string) infra {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: infraSA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "fulfiller-vms"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	if _, err := cs.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fulfiller-vms"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: infraSA, Namespace: namespace}},
	}
	if _, err := cs.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, infraSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return infra{namespace: namespace, env: map[string]string{
		"KUBE_HOST":                 controlPlane.Server,
		"KUBE_TOKEN":                tok.Status.Token,
		"KUBE_CLUSTER_CA_CERT_DATA": string(controlPlane.CAPEM),
	}}
}

// request is one run of modules/kubevirt through the runner: the kubernetes state backend
// (as the admin, in the default namespace), the infra credentials in the environment, the
// providers from the pinned filesystem mirror.
func request(t *testing.T, name string, op tfrunner.Operation, in infra, userData string, params map[string]string) tfrunner.Request {
	t.Helper()
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	tofurc := filepath.Join(filepath.Dir(testenv.ToolsBin()), "tofurc")
	if _, err := os.Stat(tofurc); err != nil {
		t.Fatalf("the providers' CLI configuration (hack/tools.sh writes it): %v", err)
	}
	module, err := filepath.Abs(filepath.Join("..", "..", "..", "modules", "kubevirt"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KUBE_CONFIG_PATH": controlPlane.Kubeconfig, "TF_CLI_CONFIG_FILE": tofurc}
	for k, v := range in.env {
		env[k] = v
	}
	p := map[string]string{"namespace": in.namespace, "image": bootImage, "cluster_name": "test-cluster"}
	for k, v := range params {
		p[k] = v
	}
	return tfrunner.Request{
		Name: name + "-" + string(op), Operation: op, ModuleDir: module, WorkDir: t.TempDir(), CacheDir: moduleCache, Shortcuts: true,
		Backend: tfrunner.Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(statelock.Key(name), "default")},
		Variables: map[string]any{
			tfrunner.VarNodeName: name, tfrunner.VarNodeType: "kv-small", tfrunner.VarZone: "infra-a",
			tfrunner.VarUserData: userData,
			tfrunner.VarLabels: map[string]string{
				"node.kubernetes.io/instance-type": "kv-small", "topology.kubernetes.io/zone": "infra-a", "karpenter.sh/nodepool": "kubevirt",
			},
			tfrunner.VarParameters: p,
		},
		Env:      env,
		TofuPath: tofu,
	}
}

func run(t *testing.T, req tfrunner.Request, secrets ...string) tfrunner.Result {
	t.Helper()
	res, log := runLogged(t, req, secrets...)
	if !res.Succeeded {
		t.Logf("%s log:\n%s", req.Operation, log)
	}
	return res
}

// runLogged runs req and returns its result and run log.
func runLogged(t *testing.T, req tfrunner.Request, secrets ...string) (tfrunner.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log testenv.SyncBuffer
	res := tfrunner.Run(ctx, req, &log, nil)
	for _, s := range secrets {
		if strings.Contains(log.String(), s) {
			t.Errorf("the %s log shows a secret", req.Operation)
		}
	}
	return res, log.String()
}

func clients(t *testing.T) (client.Client, kubernetes.Interface) {
	t.Helper()
	scheme, err := standin.Scheme()
	if err != nil {
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
	return c, cs
}

// bigUserData is a real join for node name, padded past KubeVirt's 2048-byte limit on
// inline user data with an extra cloud-config file.
func bigUserData(t *testing.T, cs kubernetes.Interface, name string) (string, bootstrap.Token) {
	t.Helper()
	return userDataWithin(t, cs, name, 0)
}

// userDataWithin renders it for a node type whose user data limit is limit (0: none); over
// it the fulfiller gzips and base64-encodes the user data.
func userDataWithin(t *testing.T, cs kubernetes.Interface, name string, limit int64) (string, bootstrap.Token) {
	t.Helper()
	tok, err := testenv.MintToken(context.Background(), cs, time.Now().Add(15*time.Minute), "kubevirt module "+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bootstrap.CACertHash(controlPlane.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	motd := strings.Repeat("a KubeVirt node of the fulfiller's test suite\n", 100)
	data, err := bootstrap.RenderUserData(bootstrap.JoinSpec{
		// A stock image, as the controller renders for the default bootstrap.install.
		Install:           bootstrap.Install{Packages: true, KubernetesVersion: "v1.36.3"},
		APIServerEndpoint: strings.TrimPrefix(controlPlane.Server, "https://"),
		Token:             tok, CACertHash: hash, NodeName: name, ProviderID: "kubevirt://" + name,
		Labels: map[string]string{"node.kubernetes.io/instance-type": "kv-small"},
		Taints: []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}},
		ExtraCloudConfig: "#cloud-config\nwrite_files:\n- path: /etc/motd\n  content: |\n" +
			"    " + strings.ReplaceAll(strings.TrimSuffix(motd, "\n"), "\n", "\n    ") + "\n",
		UserDataLimit: limit,
	})
	if err != nil {
		t.Fatal(err)
	}
	if limit == 0 && len(data) <= 2048 {
		t.Fatalf("user data of %d bytes is no test of the 2048-byte limit", len(data))
	}
	return string(data), tok
}

// TestModuleCreatesVM applies modules/kubevirt with the real kubectl provider against the
// API server (no virt controller runs in this namespace) and checks what it holds: the VM's
// spec, its labels, the Secret's user data byte for byte; then destroy removes both.
func TestModuleCreatesVM(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-module-spec")
	ctx := context.Background()
	const name = "kv-spec"
	userData, tok := bigUserData(t, cs, name)
	params := map[string]string{
		"cpu_cores": "4", "cpu_sockets": "2", "cpu_threads": "1", "memory": "6Gi",
		"storage_class": "fast", "disk_size": "30Gi",
		"multus_networks": "kv-module-spec/storage",
		"gpu_device_name": "nvidia.com/GA102GL_A10", "gpu_count": "2", "host_devices": "example.com/nvme",
		"node_selector":     `{"gpu":"a10"}`,
		"tolerations":       `[{"key":"gpu","operator":"Exists","effect":"NoSchedule"}]`,
		"affinity":          `{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]}]}}}`,
		"eviction_strategy": "LiveMigrate",
	}
	res := run(t, request(t, name, tfrunner.Apply, in, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("apply: %+v", res.Error)
	}
	if res.ProviderID != "kubevirt://"+name || res.NodeName != name || string(res.Outputs["virtual_machine"]) != `"kv-module-spec/kv-spec"` {
		t.Errorf("outputs: provider ID %q, node name %q, %s", res.ProviderID, res.NodeName, res.Outputs)
	}

	vm := &virtv1.VirtualMachine{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: in.namespace, Name: name}, vm); err != nil {
		t.Fatal(err)
	}
	spec := vm.Spec.Template.Spec
	cpu := spec.Domain.CPU
	if rs, _ := vm.RunStrategy(); rs != virtv1.RunStrategyAlways || cpu == nil || cpu.Cores != 4 || cpu.Sockets != 2 || cpu.Threads != 1 {
		t.Errorf("run strategy %v, cpu %+v", vm.Spec.RunStrategy, cpu)
	}
	if spec.Domain.Memory == nil || spec.Domain.Memory.Guest.Cmp(resource.MustParse("6Gi")) != 0 || spec.Domain.Resources.Requests.Memory().Cmp(resource.MustParse("6Gi")) != 0 {
		t.Errorf("memory %+v, requests %v", spec.Domain.Memory, spec.Domain.Resources.Requests)
	}
	wantLabels := map[string]string{
		"karpenter.sh/nodeclaim": name, "karpenter.sh/nodepool": "kubevirt", "fulfiller.sh/cluster": "test-cluster",
		"node.kubernetes.io/instance-type": "kv-small", "topology.kubernetes.io/zone": "infra-a",
	}
	for k, v := range wantLabels {
		if vm.Labels[k] != v || vm.Spec.Template.ObjectMeta.Labels[k] != v {
			t.Errorf("label %s: vm %q, template %q, want %q", k, vm.Labels[k], vm.Spec.Template.ObjectMeta.Labels[k], v)
		}
	}
	volumes := map[string]virtv1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	if v := volumes["rootdisk"]; v.DataVolume == nil || v.DataVolume.Name != name+"-root" {
		t.Errorf("root disk = %+v", v)
	}
	if v := volumes["cloudinit"]; v.CloudInitNoCloud == nil || v.CloudInitNoCloud.UserDataSecretRef == nil || v.CloudInitNoCloud.UserDataSecretRef.Name != name+"-userdata" || v.CloudInitNoCloud.UserData != "" {
		t.Errorf("cloud-init volume = %+v", v)
	}
	if len(vm.Spec.DataVolumeTemplates) != 1 {
		t.Fatalf("data volume templates = %+v", vm.Spec.DataVolumeTemplates)
	}
	dvt := vm.Spec.DataVolumeTemplates[0]
	if dvt.Name != name+"-root" || dvt.Spec.Storage == nil || ptr.Deref(dvt.Spec.Storage.StorageClassName, "") != "fast" ||
		dvt.Spec.Storage.Resources.Requests.Storage().Cmp(resource.MustParse("30Gi")) != 0 ||
		dvt.Spec.Source == nil || dvt.Spec.Source.Registry == nil || ptr.Deref(dvt.Spec.Source.Registry.URL, "") != "docker://"+bootImage {
		t.Errorf("data volume template = %+v", dvt)
	}
	if len(spec.Networks) != 2 || spec.Networks[0].Pod == nil || spec.Networks[1].Multus == nil || spec.Networks[1].Multus.NetworkName != "kv-module-spec/storage" ||
		len(spec.Domain.Devices.Interfaces) != 2 || spec.Domain.Devices.Interfaces[0].Masquerade == nil || spec.Domain.Devices.Interfaces[1].Bridge == nil {
		t.Errorf("networks %+v, interfaces %+v", spec.Networks, spec.Domain.Devices.Interfaces)
	}
	if gpus := spec.Domain.Devices.GPUs; len(gpus) != 2 || gpus[0].DeviceName != "nvidia.com/GA102GL_A10" || len(spec.Domain.Devices.HostDevices) != 1 {
		t.Errorf("gpus %+v, host devices %+v", gpus, spec.Domain.Devices.HostDevices)
	}
	if spec.NodeSelector["gpu"] != "a10" || len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "gpu" ||
		spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || ptr.Deref(spec.EvictionStrategy, "") != virtv1.EvictionStrategyLiveMigrate {
		t.Errorf("placement: selector %v, tolerations %v, affinity %+v, eviction %v", spec.NodeSelector, spec.Tolerations, spec.Affinity, spec.EvictionStrategy)
	}

	secret, err := cs.CoreV1().Secrets(in.namespace).Get(ctx, name+"-userdata", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(secret.Data["userdata"], []byte(userData)) || secret.Labels["karpenter.sh/nodeclaim"] != name {
		t.Errorf("the Secret's user data (%d bytes) differs from the claim's (%d bytes), labels %v", len(secret.Data["userdata"]), len(userData), secret.Labels)
	}

	res = run(t, request(t, name, tfrunner.Destroy, in, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("destroy: %+v", res.Error)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vm), &virtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
		t.Errorf("the VM after destroy: %v", err)
	}
	if _, err := cs.CoreV1().Secrets(in.namespace).Get(ctx, name+"-userdata", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the user data Secret after destroy: %v", err)
	}
}

// TestModuleJoins: with the simulated virt controller running, the VM the module creates
// runs, its guest boots from the Secret, joins with the bootstrap token in it and registers
// the Node kubevirt://<vm>; destroy powers it off and removes the VM, its VMI and Secret.
func TestModuleJoins(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-module-join")
	ctx := context.Background()
	machines := startStandin(t, in.namespace)
	const name = "kv-join"
	userData, tok := bigUserData(t, cs, name)
	params := map[string]string{"cpu_cores": "2", "memory": "3Gi"}

	res := run(t, request(t, name, tfrunner.Apply, in, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("apply: %+v", res.Error)
	}
	key := types.NamespacedName{Namespace: in.namespace, Name: name}
	vm := &virtv1.VirtualMachine{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, vm); err != nil {
			return false, err
		}
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning && vm.Status.Ready, nil
	})
	if err != nil {
		t.Fatalf("the VM did not run: %v; status %+v", err, vm.Status)
	}
	if v := vm.Spec.Template.Spec.Volumes[0]; v.ContainerDisk == nil || v.ContainerDisk.Image != bootImage {
		t.Errorf("root disk = %+v", v)
	}
	if got, err := os.ReadFile(filepath.Join(machines.Dir, in.namespace, name, "user-data")); err != nil || !bytes.Equal(got, []byte(userData)) {
		t.Errorf("the guest did not boot from the Secret's user data (%v)", err)
	}
	node := &corev1.Node{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		node = n
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no Ready Node %s: %v", name, err)
	}
	if node.Spec.ProviderID != res.ProviderID || node.Spec.ProviderID != "kubevirt://"+name {
		t.Errorf("Node providerID %q, module output %q", node.Spec.ProviderID, res.ProviderID)
	}
	if q := node.Status.Capacity[corev1.ResourceCPU]; q.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("Node cpu capacity %s", q.String())
	}

	res = run(t, request(t, name, tfrunner.Destroy, in, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("destroy: %+v", res.Error)
	}
	for _, obj := range []client.Object{&virtv1.VirtualMachine{}, &virtv1.VirtualMachineInstance{}} {
		if err := c.Get(ctx, key, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T after destroy: %v", obj, err)
		}
	}
	if machines.Running(key) {
		t.Error("the guest runs after destroy")
	}
}

// TestModuleDataVolume: a DataVolume disk of an existing storage class is imported by the
// simulated CDI and the VM runs from it.
func TestModuleDataVolume(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-module-dv")
	ctx := context.Background()
	startStandin(t, in.namespace)
	class := "kv-module-dv-fast"
	if err := c.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "example.com/simulated"}); err != nil {
		t.Fatal(err)
	}
	const name = "kv-dv"
	userData, tok := bigUserData(t, cs, name)
	params := map[string]string{"storage_class": class, "disk_size": "10Gi"}
	res := run(t, request(t, name, tfrunner.Apply, in, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("apply: %+v", res.Error)
	}
	key := types.NamespacedName{Namespace: in.namespace, Name: name}
	vm := &virtv1.VirtualMachine{}
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if lastErr = c.Get(ctx, key, vm); lastErr != nil {
			return false, nil // an API server slow to answer: asked again
		}
		return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning, nil
	})
	if err != nil {
		t.Fatalf("the VM did not run: %v (last read: %v); status %+v", err, lastErr, vm.Status)
	}
	dv := &cdiv1.DataVolume{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: in.namespace, Name: name + "-root"}, dv); err != nil || dv.Status.Phase != cdiv1.Succeeded {
		t.Errorf("data volume %q: %v", dv.Status.Phase, err)
	}
	res = run(t, request(t, name, tfrunner.Destroy, in, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("destroy: %+v", res.Error)
	}
	// Foreground deletion: the VM goes after its DataVolume.
	if err := c.Get(ctx, types.NamespacedName{Namespace: in.namespace, Name: name + "-root"}, &cdiv1.DataVolume{}); !apierrors.IsNotFound(err) {
		t.Errorf("the DataVolume after destroy: %v", err)
	}
}

// TestModuleForbiddenNamespace: credentials that may not write to the namespace fail the
// apply with the API server's answer, classified as a credentials error; nothing is created.
func TestModuleForbiddenNamespace(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-module-allowed")
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kv-module-other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	in.namespace = "kv-module-other"
	const name = "kv-forbidden"
	userData, tok := bigUserData(t, cs, name)
	res, log := runLogged(t, request(t, name, tfrunner.Apply, in, userData, nil), tok.Secret)
	if res.Succeeded || res.Error == nil || res.Error.Class != tfrunner.Credentials {
		t.Errorf("apply into a namespace the credentials cannot write to: %+v", res.Error)
	}
	// The provider used the class's credentials, not the state backend's kubeconfig (the
	// admin's): the API server names the infra service account. (The one-line message of
	// the classified error is cut before that part.)
	if !strings.Contains(log, `is forbidden: User \"system:serviceaccount:kv-module-allowed:fulfiller\" cannot get resource \"secrets\"`) {
		t.Errorf("the run log does not show the API server's answer to the infra service account:\n%s", log)
	}
	list := &virtv1.VirtualMachineList{}
	if err := c.List(context.Background(), list, client.InNamespace("kv-module-other")); err != nil || len(list.Items) != 0 {
		t.Errorf("VMs in the forbidden namespace: %d (%v)", len(list.Items), err)
	}
	raw, _ := json.Marshal(res.Error)
	if strings.Contains(string(raw), tok.Secret) {
		t.Error("the error shows the token")
	}
}

// startStandin runs the simulated virt controller for namespace until the test ends.
func startStandin(t *testing.T, namespace string) *standin.SimMachines {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	machines := &standin.SimMachines{Dir: t.TempDir(), Binary: []string{exe, "sim"}, HeartbeatInterval: time.Second, StopGrace: 5 * time.Second}
	c, err := standin.New(controlPlane.Config, standin.Config{
		Namespace: namespace,
		Nodes: []standin.Node{{Name: "infra-1", Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		}}},
		Images:   map[string]standin.Guest{bootImage: standin.GuestBoots},
		Machines: machines,
		Timings:  standin.Timings{Import: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(ctx); err != nil {
			t.Errorf("stand-in: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		entries, _ := os.ReadDir(filepath.Join(machines.Dir, namespace))
		for _, e := range entries {
			_ = machines.PowerOff(context.Background(), types.NamespacedName{Namespace: namespace, Name: e.Name()}, true)
		}
	})
	return machines
}

// TestModuleContract: the module keeps the module contract, as the NodeClass check reads it.
func TestModuleContract(t *testing.T) {
	t.Parallel()
	info, err := tfrunner.InspectModule(filepath.Join("..", "..", "..", "modules", "kubevirt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := info.CheckContract(); err != nil {
		t.Error(err)
	}
	if v, ok := info.Variables[tfrunner.VarUserData]; !ok || !v.Sensitive {
		t.Errorf("user_data: %+v", v)
	}
}

// TestExamples: the API server accepts examples/kubevirt as they are.
func TestExamples(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	for _, ns := range []string{"fulfiller", "tenant-nodes"} {
		if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	dir := filepath.Join("..", "..", "..", "examples", "kubevirt")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) != 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				t.Fatalf("%s #%d: %v", filepath.Base(f), i, err)
			}
			// A dry run checks existence last: AlreadyExists means the object is valid.
			if err := c.Create(context.Background(), obj, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Errorf("%s: %s %s: %v", filepath.Base(f), obj.GetKind(), obj.GetName(), err)
			}
		}
	}
}

// TestModuleGzippedUserData: user data the fulfiller gzipped and base64-encoded (over a node
// type's userDataLimit) is stored as the gzip bytes, which cloud-init decompresses: the
// guest joins with it.
func TestModuleGzippedUserData(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-module-gzip")
	ctx := context.Background()
	machines := startStandin(t, in.namespace)
	const name = "kv-gzip"
	userData, tok := userDataWithin(t, cs, name, 16<<10) // the install script makes it 22 KiB, 8 KiB gzipped
	if !strings.HasPrefix(userData, "H4sI") {
		t.Fatalf("user data over the limit is not gzipped and base64-encoded: %.20q", userData)
	}
	res := run(t, request(t, name, tfrunner.Apply, in, userData, nil), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("apply: %+v", res.Error)
	}
	secret, err := cs.CoreV1().Secrets(in.namespace).Get(ctx, name+"-userdata", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(userData)
	if !bytes.Equal(secret.Data["userdata"], raw) || !bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		t.Errorf("the Secret holds %d bytes, want the %d gzip bytes", len(secret.Data["userdata"]), len(raw))
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.Spec.ProviderID == "kubevirt://"+name, client.IgnoreNotFound(err)
	})
	if err != nil {
		log, _ := os.ReadFile(machines.LogPath(types.NamespacedName{Namespace: in.namespace, Name: name}))
		t.Fatalf("the guest did not join with gzipped user data: %v\n%s", err, log)
	}
	if res := run(t, request(t, name, tfrunner.Destroy, in, userData, nil), tok.Secret); !res.Succeeded {
		t.Fatalf("destroy: %+v", res.Error)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: in.namespace, Name: name}, &virtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
		t.Errorf("the VM after destroy: %v", err)
	}
}
