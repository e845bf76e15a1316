// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

func kubevirtClass(namespace string, types ...v1alpha1.NodeType) *v1alpha1.TofuNodeClass {
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "kv"},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:    v1alpha1.FamilyKubeVirt,
			Variables: map[string]string{"namespace": namespace, "image": bootImage},
			NodeTypes: types,
		},
	}
}

func checkReason(err error) string {
	var fe *family.Error
	if errors.As(err, &fe) {
		return fe.Reason
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

// runCheck runs the family's check of condition.
func runCheck(t *testing.T, f *Family, condition string, s family.Scope) error {
	t.Helper()
	for _, chk := range f.ClassChecks() {
		if chk.Condition == condition {
			return chk.Run(context.Background(), s)
		}
	}
	t.Fatalf("no check of %s", condition)
	return nil
}

// TestClassChecks: the infra cluster's credentials are checked against the real API
// server's authorizer, as the infra service account, before any VM is created.
func TestClassChecks(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-checks")
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kv-checks-other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kv := NewFamily()
	disk := v1alpha1.NodeType{Name: "kv-disk", Variables: map[string]string{"storage_class": "kv-checks-fast"}}
	noHost := maps.Clone(in.env)
	delete(noHost, envHost)
	badToken := maps.Clone(in.env)
	badToken[envToken] = "not-a-token"
	for _, tc := range []struct {
		name      string
		condition string
		class     *v1alpha1.TofuNodeClass
		env       map[string]string
		want      string // reason, "" passes
		msg       string
	}{
		{"access", v1alpha1.ConditionInfraAccessReady, kubevirtClass(in.namespace), in.env, "", ""},
		{"no infra cluster", v1alpha1.ConditionInfraAccessReady, kubevirtClass(in.namespace), noHost, v1alpha1.ReasonInfraKubeconfigMissing, "no KUBE_HOST"},
		{"token refused", v1alpha1.ConditionInfraAccessReady, kubevirtClass(in.namespace), badToken, v1alpha1.ReasonInvalidCredentials, "refuses the credentials"},
		{"namespace not writable", v1alpha1.ConditionInfraAccessReady, kubevirtClass("kv-checks-other"), in.env, v1alpha1.ReasonInfraNamespaceForbidden,
			"may not get secrets, create secrets, patch secrets, delete secrets, get virtualmachines.kubevirt.io, create virtualmachines.kubevirt.io"},
		{"a type's namespace not writable", v1alpha1.ConditionInfraAccessReady,
			kubevirtClass(in.namespace, v1alpha1.NodeType{Name: "elsewhere", Variables: map[string]string{"namespace": "kv-checks-other"}}), in.env,
			v1alpha1.ReasonInfraNamespaceForbidden, "in namespace kv-checks-other"},
		{"no storage class named", v1alpha1.ConditionStorageClassReady, kubevirtClass(in.namespace, v1alpha1.NodeType{Name: "kv-small"}), in.env, "", ""},
		// The infra service account may not read storage classes: the check cannot tell.
		{"storage classes not readable", v1alpha1.ConditionStorageClassReady, kubevirtClass(in.namespace, disk), in.env, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runCheck(t, kv, tc.condition, family.Scope{Class: tc.class, Env: tc.env, Cluster: "test-cluster"})
			if got := checkReason(err); got != tc.want || err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("check = %v (reason %q), want reason %q with %q", err, got, tc.want, tc.msg)
			}
		})
	}

	// With the right to read storage classes, an unknown one is named.
	ctx := context.Background()
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kv-checks-storageclasses"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{storagev1.GroupName}, Resources: []string{"storageclasses"}, Verbs: []string{"get"}}}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kv-checks-storageclasses"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: infraSA, Namespace: in.namespace}}}
	for _, o := range []client.Object{cr, crb} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	s := family.Scope{Class: kubevirtClass(in.namespace, disk), Env: in.env, Cluster: "test-cluster"}
	// RBAC is read from the informer cache of the API server: ask until it applies.
	var err error
	if perr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = runCheck(t, kv, v1alpha1.ConditionStorageClassReady, s)
		return checkReason(err) == v1alpha1.ReasonStorageClassNotFound, nil
	}); perr != nil {
		t.Fatalf("an unknown storage class: %v", err)
	}
	if !strings.Contains(err.Error(), "storage class kv-checks-fast of node type kv-disk does not exist") {
		t.Errorf("message %q", err)
	}
	if err := c.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "kv-checks-fast"}, Provisioner: "example.com/simulated"}); err != nil {
		t.Fatal(err)
	}
	if err := runCheck(t, kv, v1alpha1.ConditionStorageClassReady, s); err != nil {
		t.Errorf("an existing storage class: %v", err)
	}
}

// TestInventory: List returns the VMs labelled as this cluster's in the class's namespaces,
// nothing else; Delete deletes a VM and its cloud-init Secret, and only this cluster's.
func TestInventory(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-inventory")
	ctx := context.Background()
	mk := func(name string, labels map[string]string) {
		t.Helper()
		vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: in.namespace, Labels: labels},
			Spec: virtv1.VirtualMachineSpec{Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-userdata", Namespace: in.namespace, Labels: labels}}
		for _, o := range []client.Object{vm, secret} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	mine := map[string]string{keys.LabelCluster: "test-cluster", keys.LabelNodeClaim: "n1", keys.LabelNodeClass: "kv", keys.LabelNodePool: "pool"}
	before := time.Now()
	mk("n1", mine)
	mk("n2", map[string]string{keys.LabelCluster: "other-cluster", keys.LabelNodeClaim: "n2"})
	mk("n3", map[string]string{keys.LabelNodeClaim: "n3"})
	kv := NewFamily()
	s := family.Scope{Class: kubevirtClass(in.namespace), Env: in.env, Cluster: "test-cluster"}
	got, err := kv.List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("List() = %+v, want n1 only", got)
	}
	m := got[0]
	// The API server keeps creationTimestamp to the second: Created is the latest moment the
	// VM could have been created, never before it was (issue 25, defect 14, as in hcloud).
	if m.Created.Before(before) || m.Created.After(time.Now().Add(time.Second)) {
		t.Errorf("Created %s, want between %s and a second after now", m.Created.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano))
	}
	if m.ID != in.namespace+"/n1" || m.Name != "n1" || m.ProviderID != "kubevirt://n1" || m.Cluster != "test-cluster" || m.Claim != "n1" ||
		m.Class != "kv" || m.NodePool != "pool" || m.Created.IsZero() {
		t.Errorf("machine %+v", m)
	}
	if _, err := kv.List(ctx, family.Scope{Class: s.Class, Env: in.env}); err == nil {
		t.Error("List without a cluster name lists")
	}
	other := m
	other.ID, other.Name = in.namespace+"/n2", "n2"
	if err := kv.Delete(ctx, s, other); err == nil {
		t.Error("Delete deleted another cluster's VM")
	}
	if err := kv.Delete(ctx, s, m); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, types.NamespacedName{Namespace: in.namespace, Name: "n1"}, &virtv1.VirtualMachine{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("the VM after Delete: %v", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: in.namespace, Name: "n1-userdata"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret after Delete: %v", err)
	}
	for _, name := range []string{"n2", "n3"} {
		if err := c.Get(ctx, types.NamespacedName{Namespace: in.namespace, Name: name}, &virtv1.VirtualMachine{}); err != nil {
			t.Errorf("VM %s: %v", name, err)
		}
	}
	if err := kv.Delete(ctx, s, m); err != nil {
		t.Errorf("Delete of a VM already gone: %v", err)
	}
}

// TestObserveStandin: the watcher reads VMs the simulated virt controller drives, with the
// infra service account's credentials: an unschedulable VM, an image that cannot be pulled,
// and a VM deleted by hand.
func TestObserveStandin(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-observe")
	startStandin(t, in.namespace)
	ctx := context.Background()
	vm := func(name, image, memory string) {
		t.Helper()
		guest := resource.MustParse(memory)
		obj := &virtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: in.namespace},
			Spec: virtv1.VirtualMachineSpec{
				RunStrategy: ptr.To(virtv1.RunStrategyAlways),
				Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{CPU: &virtv1.CPU{Cores: 1}, Memory: &virtv1.Memory{Guest: &guest},
						Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "rootdisk", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}}}}},
					Volumes: []virtv1.Volume{{Name: "rootdisk", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: image}}}},
				}},
			},
		}
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	vm("kvo-big", bootImage, "128Gi")
	vm("kvo-pull", "quay.io/containerdisks/nope:1", "1Gi")
	kv := NewFamily()
	s := family.Scope{Class: kubevirtClass(in.namespace), Env: in.env, Cluster: "test-cluster"}
	observeUntil := func(name, reason string) family.Observation {
		t.Helper()
		f := &v1alpha1.Fulfillment{Spec: v1alpha1.FulfillmentSpec{NodeName: name, NodeType: "kv-small"}}
		var obs family.Observation
		var err error
		if perr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			obs, err = kv.Observe(ctx, s, f)
			return err == nil && obs.Reason == reason, nil
		}); perr != nil {
			t.Fatalf("observing %s: %+v (%v), want %s", name, obs, err, reason)
		}
		return obs
	}
	if obs := observeUntil("kvo-big", v1alpha1.ReasonVMUnschedulable); !obs.CapacityFailure || !strings.Contains(obs.Message, "ErrorUnschedulable: 0/1 nodes are available: 1 Insufficient memory") {
		t.Errorf("unschedulable: %+v", obs)
	}
	if obs := observeUntil("kvo-pull", v1alpha1.ReasonVMImagePullFailed); obs.CapacityFailure || !strings.Contains(obs.Message, "quay.io/containerdisks/nope:1") {
		t.Errorf("image pull: %+v", obs)
	}
	if err := c.Delete(ctx, &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "kvo-big", Namespace: in.namespace}}); err != nil {
		t.Fatal(err)
	}
	f := &v1alpha1.Fulfillment{Spec: v1alpha1.FulfillmentSpec{NodeName: "kvo-big", NodeType: "kv-small"}}
	if obs, err := kv.Observe(ctx, s, f); err != nil || !obs.Gone {
		t.Errorf("a VM deleted by hand: %+v (%v)", obs, err)
	}
}

// TestObserveUsesRecordedSettings (issue 25, defect 3): the watcher looks for a claim's VM
// where its runs made it, with the parameters recorded at Create (spec.settings), not where
// the class says now: a class whose namespace changed, or whose node type is gone, does not
// make the claim's VM look deleted.
func TestObserveUsesRecordedSettings(t *testing.T) {
	t.Parallel()
	c, cs := clients(t)
	in := newInfra(t, cs, "kv-recorded")
	ctx := context.Background()
	// The namespace the class names now, where the same credentials may read VMs too.
	elsewhere := newInfra(t, cs, "kv-recorded-new").namespace
	if _, err := cs.RbacV1().RoleBindings(elsewhere).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fulfiller-vms-recorded"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fulfiller-vms"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: infraSA, Namespace: in.namespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	guest := resource.MustParse("1Gi")
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "kvr-1", Namespace: in.namespace},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{CPU: &virtv1.CPU{Cores: 1}, Memory: &virtv1.Memory{Guest: &guest}},
			}},
		},
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	small := v1alpha1.NodeType{Name: "kv-small", Variables: map[string]string{"cpu": "1"}}
	recorded := &v1alpha1.Fulfillment{Spec: v1alpha1.FulfillmentSpec{NodeName: "kvr-1", NodeType: "kv-small",
		Settings: &v1alpha1.RunSettings{Parameters: map[string]string{"namespace": in.namespace, "image": bootImage, "cpu": "1"}}}}
	kv := NewFamily()
	for _, tc := range []struct {
		name  string
		class *v1alpha1.TofuNodeClass
	}{
		{name: "as created", class: kubevirtClass(in.namespace, small)},
		{name: "namespace changed", class: kubevirtClass(elsewhere, small)},
		{name: "node type removed", class: kubevirtClass(elsewhere)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := family.Scope{Class: tc.class, Env: in.env, Cluster: "test-cluster"}
			obs, err := kv.Observe(ctx, s, recorded)
			if err != nil || obs.Gone {
				t.Errorf("Observe = %+v, %v: the VM in %s, where the claim's runs made it, looks gone", obs, err, in.namespace)
			}
		})
	}
	// A Fulfillment made before settings were recorded uses its class's.
	legacy := &v1alpha1.Fulfillment{Spec: v1alpha1.FulfillmentSpec{NodeName: "kvr-1", NodeType: "kv-small"}}
	if obs, err := kv.Observe(ctx, family.Scope{Class: kubevirtClass(in.namespace, small), Env: in.env}, legacy); err != nil || obs.Gone {
		t.Errorf("without recorded settings: Observe = %+v, %v", obs, err)
	}
}

// TestProxyURLNotLeaked (issue 25, defect 13): a KUBE_PROXY_URL that does not parse is a
// clear error of the credentials that does not show the URL, whose user info may hold a
// password.
func TestProxyURLNotLeaked(t *testing.T) {
	const password = "s3cr3t-proxy-pw"
	for _, proxy := range []string{
		"http://ops:" + password + "@proxy.internal:31 28",
		"http://ops:" + password + "@proxy internal:3128",
		"://ops:" + password + "@proxy.internal:3128",
		"http://ops:" + password + "@proxy.internal:3128/%zz",
	} {
		env := map[string]string{"KUBE_HOST": "https://127.0.0.1:6443", "KUBE_TOKEN": "t", "KUBE_PROXY_URL": proxy}
		cfg, err := restConfig(env, "")
		if err == nil {
			_, err = cfg.Proxy(nil)
		}
		if err == nil {
			t.Errorf("proxy %q: no error", proxy)
			continue
		}
		if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "ops:") {
			t.Errorf("proxy %q: the error shows its user info: %v", proxy, err)
		}
		if reason := checkReason(err); reason != v1alpha1.ReasonInvalidCredentials {
			t.Errorf("proxy %q: reason %q (%v), want %s", proxy, reason, err, v1alpha1.ReasonInvalidCredentials)
		}
	}
	// One that parses is used as it is.
	cfg, err := restConfig(map[string]string{"KUBE_HOST": "https://127.0.0.1:6443", "KUBE_PROXY_URL": "http://ops:" + password + "@proxy.internal:3128"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if u, err := cfg.Proxy(nil); err != nil || u.Host != "proxy.internal:3128" {
		t.Errorf("proxy = %v, %v", u, err)
	}
}
