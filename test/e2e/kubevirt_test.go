// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt/standin"
)

// infraClient reads KubeVirt's objects on the environment's infra cluster (its own API
// server) as the admin.
func infraClient(t *testing.T) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: env.dir}.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := standin.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubevirtCredentials writes the class's credentials Secret: the infra service account's
// token (of limited RBAC, devenv's infra namespace only), the API server and its CA.
func kubevirtCredentials(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: env.dir}.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := clientset(t).CoreV1().ServiceAccounts(devenv.InfraNamespace).CreateToken(ctx, devenv.InfraServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: name, Labels: map[string]string{v1alpha1.LabelCredentials: "true"}}, StringData: map[string]string{
		"KUBE_HOST": cfg.Host, "KUBE_TOKEN": tok.Status.Token, "KUBE_CLUSTER_CA_CERT_DATA": string(cfg.CAData),
	}}
	create(t, ctx, secret)
	t.Cleanup(func() { _ = env.kube.Delete(context.Background(), secret) })
}

// kubevirtClass is a class of modules/kubevirt on the environment's infra cluster. Its
// extra cloud-config pads the user data past KubeVirt's 2048-byte limit on inline user data.
func kubevirtClass(name, credentials string, types ...v1alpha1.NodeType) *v1alpha1.TofuNodeClass {
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:      v1alpha1.FamilyKubeVirt,
			Module:      v1alpha1.ModuleSource{Source: filepath.Join(env.vars["MODULES"], "kubevirt"), Version: "e2e"},
			Credentials: []v1alpha1.CredentialsSource{{SecretName: credentials}},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: env.vars["API_SERVER"], TokenTTL: metav1.Duration{Duration: 15 * time.Minute},
				ExtraCloudConfig: "#cloud-config\nwrite_files:\n- path: /etc/motd\n  content: |\n    " + strings.Repeat("a tenant node of the e2e suite; ", 40) + "\n"},
			Variables: map[string]string{"namespace": devenv.InfraNamespace, "image": devenv.InfraBootImage, "cluster_name": "e2e"},
			NodeTypes: types,
		},
	}
}

func kubevirtType(name, price, memory string, joinTimeout time.Duration, vars map[string]string) v1alpha1.NodeType {
	v := map[string]string{"cpu_cores": "2", "memory": memory}
	for k, val := range vars {
		v[k] = val
	}
	return v1alpha1.NodeType{
		Name:               name,
		Capacity:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Overhead:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		ProviderIDTemplate: "kubevirt://{name}",
		Offerings:          []v1alpha1.Offering{{Zone: "infra-a", Price: price}},
		Variables:          v,
		JoinTimeout:        &metav1.Duration{Duration: joinTimeout},
	}
}

// joinedReason is the reason a tracked Fulfillment's Joined condition last had with status.
func joinedAs(f *v1alpha1.Fulfillment, status metav1.ConditionStatus, reason string) bool {
	c := f.StatusConditions().Get(v1alpha1.ConditionJoined)
	return c != nil && c.Status == status && c.Reason == reason
}

// TestKubeVirtNodes: on the Job executor, a pending pod gets a node through modules/kubevirt,
// the real kubectl provider and the simulated virt controller. The cheapest type's VM cannot
// be scheduled on the infra cluster: at its join timeout that is insufficient capacity and
// Karpenter plans onto the next type, whose VM (its spec as the API server holds it) joins as
// kubevirt://<vm>. A VM deleted by hand is seen, the claim replaced through Karpenter and its
// state cleaned up; scale to zero deletes the VMs, their Secrets and the states. Meanwhile,
// in a class and pool of its own, a VM whose image cannot be pulled shows VMImagePullFailed
// with the VM's own message while its claim waits, and the claim is replaced after its join
// timeout with nothing leaked (run alongside, so the suite waits for both timeouts once).
func TestKubeVirtNodes(t *testing.T) {
	ctx := ctxFor(t, 14*time.Minute)
	tr := trackFulfillments(t)
	infra := infraClient(t)
	kubevirtCredentials(t, ctx, "e2e-kubevirt-infra")
	huge := kubevirtType("kv-huge", "0.01", "32Gi", 30*time.Second, nil) // more than the infra node's 16Gi
	small := kubevirtType("kv-small", "0.02", "2Gi", 3*time.Minute, nil)
	missing := kubevirtType("kv-missing", "0.01", "1Gi", 30*time.Second, map[string]string{"image": devenv.InfraMissingImage})
	startScenario(t, ctx, kubevirtClass("e2e-kubevirt", "e2e-kubevirt-infra", huge, small), nodePool("e2e-kubevirt", "e2e-kubevirt"))
	startScenario(t, ctx, kubevirtClass("e2e-kubevirt-pull", "e2e-kubevirt-infra", missing), nodePool("e2e-kubevirt-pull", "e2e-kubevirt-pull"))
	create(t, ctx, deployment("kubevirt", "e2e-kubevirt", 1, "500m"), deployment("kubevirt-pull", "e2e-kubevirt-pull", 1, "500m"))
	eventually(t, ctx, 6*time.Minute, "the pod to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "kubevirt"}, 1)
	})

	// The unschedulable VM: its claim waited with VMUnschedulable in the scheduler's words,
	// failed at the join timeout, and was the only one of its offering.
	hugeClaims := tr.byType("kv-huge")
	if len(hugeClaims) != 1 {
		t.Fatalf("%d claims tried kv-huge, want exactly 1 (the unschedulable offering must be marked unavailable)", len(hugeClaims))
	}
	eventually(t, ctx, 2*time.Minute, "the unschedulable claim to fail and be destroyed", func(ctx context.Context) (bool, error) {
		f := tr.byType("kv-huge")[0]
		return joinedAs(f, metav1.ConditionFalse, v1alpha1.ReasonVMUnschedulable) && f.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed), nil
	})
	if c := tr.byType("kv-huge")[0].StatusConditions().Get(v1alpha1.ConditionJoined); !strings.Contains(c.Message, "ErrorUnschedulable: 0/1 nodes are available: 1 Insufficient memory") {
		t.Errorf("the unschedulable claim's Joined: %+v", c)
	}

	// The VM that joined, as the API server holds it.
	pods := &corev1.PodList{}
	if err := env.kube.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "kubevirt"}); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: pods.Items[0].Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	vmName := node.Name
	if node.Spec.ProviderID != "kubevirt://"+vmName || node.Labels[corev1.LabelInstanceTypeStable] != "kv-small" {
		t.Errorf("node %s: providerID %q, type %q", node.Name, node.Spec.ProviderID, node.Labels[corev1.LabelInstanceTypeStable])
	}
	vm := &virtv1.VirtualMachine{}
	if err := infra.Get(ctx, client.ObjectKey{Namespace: devenv.InfraNamespace, Name: vmName}, vm); err != nil {
		t.Fatal(err)
	}
	spec := vm.Spec.Template.Spec
	if rs, _ := vm.RunStrategy(); rs != virtv1.RunStrategyAlways || spec.Domain.CPU == nil || spec.Domain.CPU.Cores != 2 ||
		spec.Domain.Memory == nil || spec.Domain.Memory.Guest.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("vm %s: run strategy, cpu %+v, memory %+v", vmName, spec.Domain.CPU, spec.Domain.Memory)
	}
	var secretRef string
	for _, v := range spec.Volumes {
		switch {
		case v.ContainerDisk != nil && v.ContainerDisk.Image != devenv.InfraBootImage:
			t.Errorf("vm %s: disk image %s", vmName, v.ContainerDisk.Image)
		case v.CloudInitNoCloud != nil && v.CloudInitNoCloud.UserDataSecretRef != nil:
			secretRef = v.CloudInitNoCloud.UserDataSecretRef.Name
		}
	}
	if secretRef != vmName+"-userdata" {
		t.Errorf("vm %s: cloud-init secretRef %q", vmName, secretRef)
	}
	for k, want := range map[string]string{keys.LabelNodeClaim: vmName, keys.LabelCluster: "e2e", karpv1.NodePoolLabelKey: "e2e-kubevirt",
		corev1.LabelInstanceTypeStable: "kv-small"} {
		if vm.Labels[k] != want {
			t.Errorf("vm %s: label %s=%q, want %q", vmName, k, vm.Labels[k], want)
		}
	}
	userData := &corev1.Secret{}
	if err := infra.Get(ctx, client.ObjectKey{Namespace: devenv.InfraNamespace, Name: secretRef}, userData); err != nil {
		t.Fatal(err)
	}
	if n := len(userData.Data["userdata"]); n <= 2048 {
		t.Errorf("the user data is %d bytes, want over KubeVirt's 2048-byte inline limit", n)
	}
	var joined *v1alpha1.Fulfillment
	for _, f := range tr.byType("kv-small") {
		if f.Name == vmName {
			joined = f
		}
	}
	if joined == nil || len(joined.Status.Runs) == 0 {
		t.Fatalf("no fulfillment with runs for %s", vmName)
	}
	if log := runLog(t, joined.Status.Runs[0]); !strings.Contains(log, `"type":"apply_complete"`) || !strings.Contains(log, "kubectl_manifest.virtual_machine") {
		t.Errorf("the run log of %s (kubectl logs) shows no completed apply of the VM:\n%s", vmName, log)
	}

	// The image that cannot be pulled.
	eventually(t, ctx, 4*time.Minute, "a kv-missing claim to show VMImagePullFailed, fail at its join timeout and be destroyed", func(ctx context.Context) (bool, error) {
		for _, f := range tr.byType("kv-missing") {
			if joinedAs(f, metav1.ConditionFalse, v1alpha1.ReasonVMImagePullFailed) && f.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed) {
				if c := f.StatusConditions().Get(v1alpha1.ConditionJoined); !strings.Contains(c.Message, devenv.InfraMissingImage) {
					t.Errorf("Joined of %s: %q does not name the image", f.Name, c.Message)
				}
				return true, nil
			}
		}
		return false, nil
	})
	_ = env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubevirt-pull"}})
	_ = env.kube.Delete(ctx, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-kubevirt-pull"}})
	eventually(t, ctx, 3*time.Minute, "every kv-missing claim and its VM to be gone", func(ctx context.Context) (bool, error) {
		list := &v1alpha1.FulfillmentList{}
		if err := env.kube.List(ctx, list); err != nil {
			return false, err
		}
		for _, f := range list.Items {
			if f.Spec.NodeType == "kv-missing" {
				return false, nil
			}
		}
		vms := &virtv1.VirtualMachineList{}
		if err := infra.List(ctx, vms, client.InNamespace(devenv.InfraNamespace), client.MatchingLabels{corev1.LabelInstanceTypeStable: "kv-missing"}); err != nil {
			return false, err
		}
		return len(vms.Items) == 0, nil
	})
	_ = env.kube.Delete(ctx, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-kubevirt-pull"}})

	// A VM deleted by hand on the infra cluster: seen, the claim replaced, its state gone.
	kubectl(t, "-n", devenv.InfraNamespace, "delete", "virtualmachine", vmName, "--wait=false")
	eventually(t, ctx, 3*time.Minute, "the claim of the deleted VM to fail with MachineDeleted and be destroyed", func(ctx context.Context) (bool, error) {
		for _, f := range tr.byType("kv-small") {
			if f.Name == vmName {
				return joinedAs(f, metav1.ConditionFalse, v1alpha1.ReasonMachineDeleted) && f.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed), nil
			}
		}
		return false, nil
	})
	eventually(t, ctx, 5*time.Minute, "the pod to be bound to a replacement node", func(ctx context.Context) (bool, error) {
		if err := env.kube.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "kubevirt"}); err != nil {
			return false, err
		}
		return len(pods.Items) == 1 && pods.Items[0].Spec.NodeName != "" && pods.Items[0].Spec.NodeName != vmName, nil
	})
	eventually(t, ctx, time.Minute, "the deleted VM's claim, state and Secret to be gone", func(ctx context.Context) (bool, error) {
		if err := env.kube.Get(ctx, client.ObjectKey{Name: vmName}, &karpv1.NodeClaim{}); client.IgnoreNotFound(err) != nil || err == nil {
			return false, client.IgnoreNotFound(err)
		}
		states := &corev1.SecretList{}
		if err := env.kube.List(ctx, states, client.InNamespace(devenv.StateNamespace), client.MatchingLabels{"tfstate": "true"}); err != nil {
			return false, err
		}
		for _, s := range states.Items {
			if strings.Contains(s.Name, vmName) {
				return false, nil
			}
		}
		err := infra.Get(ctx, client.ObjectKey{Namespace: devenv.InfraNamespace, Name: vmName + "-userdata"}, &corev1.Secret{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})

	// Scale to zero: every VM, its Secret and its state go.
	scale(t, ctx, "kubevirt", 0)
	eventually(t, ctx, 4*time.Minute, "consolidation to destroy every node and remove its state", func(ctx context.Context) (bool, error) {
		ok, _, err := devenv.Drained(ctx, env.kube)
		return ok, err
	})
	assertNoVMs(t, ctx, infra)
	cleanup(t, "kubevirt", "e2e-kubevirt", "e2e-kubevirt")
}

// assertNoVMs checks that no VM and no cloud-init Secret is left on the infra cluster.
func assertNoVMs(t *testing.T, ctx context.Context, infra client.Client) {
	t.Helper()
	eventually(t, ctx, time.Minute, "no VM and no cloud-init Secret on the infra cluster", func(ctx context.Context) (bool, error) {
		vms := &virtv1.VirtualMachineList{}
		if err := infra.List(ctx, vms, client.InNamespace(devenv.InfraNamespace)); err != nil {
			return false, err
		}
		secrets := &corev1.SecretList{}
		if err := infra.List(ctx, secrets, client.InNamespace(devenv.InfraNamespace), client.HasLabels{keys.LabelNodeClaim}); err != nil {
			return false, err
		}
		return len(vms.Items) == 0 && len(secrets.Items) == 0, nil
	})
}
