// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt/standin/crds"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// testMainEnv makes the test binary act as `fulfiller sim` when SimMachines starts a machine.
const testMainEnv = "KUBEVIRT_STANDIN_TEST_MAIN"

var controlPlane *testenv.ControlPlane

func TestMain(m *testing.M) {
	if os.Getenv(testMainEnv) == "1" {
		args := os.Args[1:]
		if len(args) > 0 && args[0] == "sim" {
			args = args[1:]
		}
		os.Exit(sim.Main(args))
	}
	os.Setenv(testMainEnv, "1")
	os.Exit(testenv.RunMain(m, &controlPlane, testenv.Options{CRDs: append(testenv.DefaultCRDs(), crds.CRDs()...)}))
}

func clients(t *testing.T) (client.Client, kubernetes.Interface) {
	t.Helper()
	scheme, err := Scheme()
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

// namespace creates a namespace for one test.
func namespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-")
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// testNodes are two infra nodes of 4 CPUs and 8Gi each, one with two GPUs.
func testNodes() []Node {
	gpu := infraNode("infra-gpu", "4", "8Gi", "nvidia.com/A10", "2")
	gpu.Labels = map[string]string{"gpu": "a10"}
	return []Node{infraNode("infra-1", "4", "8Gi"), gpu}
}

// startStandin runs a stand-in for namespace ns until the test ends; its guests are
// simulated machines under a temporary folder.
func startStandin(t *testing.T, ns string, cfg Config) *SimMachines {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	machines := &SimMachines{Dir: t.TempDir(), Binary: []string{exe, "sim"}, HeartbeatInterval: time.Second, StopGrace: 5 * time.Second}
	cfg.Namespace = ns
	if cfg.Machines == nil {
		cfg.Machines = machines
	}
	if cfg.Nodes == nil {
		cfg.Nodes = testNodes()
	}
	c, err := New(controlPlane.Config, cfg)
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
		// Power off whatever a failed test left running.
		entries, _ := os.ReadDir(filepath.Join(machines.Dir, ns))
		for _, e := range entries {
			_ = machines.PowerOff(context.Background(), types.NamespacedName{Namespace: ns, Name: e.Name()}, true)
		}
	})
	return machines
}

// joinUserData mints a bootstrap token and renders the user data a claim named name gets.
func joinUserData(t *testing.T, cs kubernetes.Interface, name string) []byte {
	t.Helper()
	ctx := context.Background()
	tok, err := testenv.MintToken(ctx, cs, time.Now().Add(15*time.Minute), "kubevirt stand-in "+t.Name())
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
		Token:             tok, CACertHash: hash, NodeName: name, ProviderID: "kubevirt://" + name,
		Labels: map[string]string{"node.kubernetes.io/instance-type": "kv-small"},
		Taints: []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func userDataSecret(ns, name string, data []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{"userdata": data}}
}

// testVMObject is a VM of the shape modules/kubevirt creates: a containerDisk (or a
// DataVolume), a cloud-init Secret, the pod network.
func testVMObject(ns, name, image, secret string, cores uint32, memory string) *virtv1.VirtualMachine {
	guest := resource.MustParse(memory)
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"karpenter.sh/nodeclaim": name}},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubevirt.io/vm": name}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{
						CPU:    &virtv1.CPU{Cores: cores},
						Memory: &virtv1.Memory{Guest: &guest},
						Devices: virtv1.Devices{
							Disks: []virtv1.Disk{
								{Name: "rootdisk", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}},
								{Name: "cloudinit", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}},
							},
							Interfaces: []virtv1.Interface{{Name: "default", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}},
						},
					},
					Networks: []virtv1.Network{{Name: "default", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}},
					Volumes: []virtv1.Volume{
						{Name: "rootdisk", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: image}}},
						{Name: "cloudinit", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserDataSecretRef: &corev1.LocalObjectReference{Name: secret}}}},
					},
				},
			},
		},
	}
	return vm
}

// withDataVolumeDisk replaces the containerDisk by a DataVolume template of storage class
// class importing image.
func withDataVolumeDisk(vm *virtv1.VirtualMachine, dvName, class, image string) *virtv1.VirtualMachine {
	vm.Spec.DataVolumeTemplates = []virtv1.DataVolumeTemplateSpec{{
		ObjectMeta: metav1.ObjectMeta{Name: dvName},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://" + image)}},
			Storage: &cdiv1.StorageSpec{
				StorageClassName: ptr.To(class),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}},
			},
		},
	}}
	vm.Spec.Template.Spec.Volumes[0].VolumeSource = virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: dvName}}
	return vm
}

func storageClass(name string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/simulated"}
}

// statusRecorder polls a VM and records each printable status it shows, in order.
type statusRecorder struct {
	mu   sync.Mutex
	seen []virtv1.VirtualMachinePrintableStatus
}

func recordStatuses(t *testing.T, c client.Client, key types.NamespacedName) *statusRecorder {
	r := &statusRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 25*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			vm := &virtv1.VirtualMachine{}
			if err := c.Get(ctx, key, vm); err == nil {
				r.mu.Lock()
				if s := vm.Status.PrintableStatus; s != "" && (len(r.seen) == 0 || r.seen[len(r.seen)-1] != s) {
					r.seen = append(r.seen, s)
				}
				r.mu.Unlock()
			}
			return false, nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *statusRecorder) statuses() []virtv1.VirtualMachinePrintableStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]virtv1.VirtualMachinePrintableStatus(nil), r.seen...)
}

func (r *statusRecorder) saw(s virtv1.VirtualMachinePrintableStatus) bool {
	for _, x := range r.statuses() {
		if x == s {
			return true
		}
	}
	return false
}

// waitVM polls the VM until cond holds.
func waitVM(t *testing.T, c client.Client, key types.NamespacedName, what string, cond func(*virtv1.VirtualMachine) bool) *virtv1.VirtualMachine {
	t.Helper()
	vm := &virtv1.VirtualMachine{}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, vm); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cond(vm), nil
	})
	if err != nil {
		t.Fatalf("waiting for vm %s to be %s: %v; last status: %s", key, what, err, describeVM(vm))
	}
	return vm
}

func describeVM(vm *virtv1.VirtualMachine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "printableStatus=%s ready=%v created=%v", vm.Status.PrintableStatus, vm.Status.Ready, vm.Status.Created)
	for _, c := range vm.Status.Conditions {
		fmt.Fprintf(&b, "; %s=%s %s %q", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func printable(s virtv1.VirtualMachinePrintableStatus) func(*virtv1.VirtualMachine) bool {
	return func(vm *virtv1.VirtualMachine) bool { return vm.Status.PrintableStatus == s }
}

func vmCondition(vm *virtv1.VirtualMachine, t virtv1.VirtualMachineConditionType) *virtv1.VirtualMachineCondition {
	for i := range vm.Status.Conditions {
		if vm.Status.Conditions[i].Type == t {
			return &vm.Status.Conditions[i]
		}
	}
	return nil
}

// waitGone polls until obj is gone.
func waitGone(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, obj)
		if err != nil {
			return client.IgnoreNotFound(err) == nil, client.IgnoreNotFound(err)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for %T %s to go: %v (finalizers %v)", obj, key, err, obj.GetFinalizers())
	}
}
