// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpcloudprovider "sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// clusterCA is the cluster CA ConfigMap in the fulfiller's namespace.
func clusterCA(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	ca, err := test.ClusterCA("fulfiller")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestBootstrapRendersGatesAndLimits: the user data carries the unregistered taint, the
// type's readiness taints and the merged kubelet args; over the type's size limit it is
// compressed; too large even then, the claim fails with UserDataTooLarge before any token or
// user data exists.
func TestBootstrapRendersGatesAndLimits(t *testing.T) {
	extra := "#cloud-config\nwrite_files:\n- path: /etc/big\n  content: " + strings.Repeat("x", 6000) + "\n"
	for _, tc := range []struct {
		name       string
		limit      string
		tooLarge   bool
		compressed bool
	}{
		{name: "no limit"},
		{name: "compressed under the limit", limit: "16Ki", compressed: true},
		{name: "too large", limit: "200", tooLarge: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(time.Now())
			nc := test.TwoTypeClass()
			nc.Spec.Bootstrap.ExtraCloudConfig = extra
			nc.Spec.Bootstrap.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "max-pods", Value: "50"}}
			nc.Spec.NodeTypes = append(nc.Spec.NodeTypes, test.GPUType())
			nt := &nc.Spec.NodeTypes[2]
			if tc.limit != "" {
				q := resource.MustParse(tc.limit)
				nt.UserDataLimit = &q
			}
			ca := clusterCA(t)
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(ca).Build()
			unavailable := cloudprovider.NewUnavailableOfferings(clk, time.Minute)
			stage := &bootstrapStage{kube: kube, apiReader: kube, clock: clk, namespace: "fulfiller", serverVersion: testServerVersion, unavailable: unavailable}
			f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim"},
				Spec: v1alpha1.FulfillmentSpec{NodeType: "gpu", NodeName: "claim", Zone: "a", CapacityType: "on-demand", ProviderID: "sim://claim"}}
			s := &claimState{Claim: run.Claim{F: f, Class: nc, NodeType: nt}, claim: &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim"}}}
			s.Conds = f.StatusConditions(status.WithClock(clk))
			if _, err := stage.reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			secrets := &corev1.SecretList{}
			if err := kube.List(ctx, secrets); err != nil {
				t.Fatal(err)
			}
			if tc.tooLarge {
				applied := s.Conds.Get(v1alpha1.ConditionApplied)
				if !applied.IsFalse() || applied.Reason != v1alpha1.ReasonUserDataTooLarge || !strings.Contains(applied.Message, "over the node type's limit of 200 bytes") {
					t.Errorf("Applied = %+v", applied)
				}
				if len(secrets.Items) != 0 || s.F.Status.UserDataSecret != "" {
					t.Errorf("%d secrets left for a claim that cannot get a machine", len(secrets.Items))
				}
				if !s.Replace || !unavailable.IsUnavailable("gpu", "a", "on-demand") || len(s.Events) != 2 {
					t.Errorf("replace %v, unavailable %v, events %+v", s.Replace, unavailable.IsUnavailable("gpu", "a", "on-demand"), s.Events)
				}
				return
			}
			if len(secrets.Items) != 2 {
				t.Fatalf("%d secrets, want the token and the user data", len(secrets.Items))
			}
			ud := &corev1.Secret{}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: "fulfiller", Name: s.F.Status.UserDataSecret}, ud); err != nil {
				t.Fatal(err)
			}
			data := ud.Data[classconfig.UserDataKey]
			if got := !strings.HasPrefix(string(data), "#cloud-config"); got != tc.compressed {
				t.Errorf("compressed = %v, want %v (%d bytes)", got, tc.compressed, len(data))
			}
			jc, err := bootstrap.ParseUserData(data)
			if err != nil {
				t.Fatal(err)
			}
			var taints []string
			for _, taint := range jc.NodeRegistration.Taints {
				taints = append(taints, taint.ToString())
			}
			want := "karpenter.sh/unregistered:NoExecute,readiness.k8s.io/fulfiller.sh-cni:NoSchedule,readiness.k8s.io/fulfiller.sh-gpu:NoSchedule"
			if strings.Join(taints, ",") != want {
				t.Errorf("registration taints %v, want %s", taints, want)
			}
			if v, _ := jc.NodeRegistration.Arg("max-pods"); v != "50" {
				t.Errorf("kubelet max-pods = %q", v)
			}
		})
	}
}

// TestBootstrapProviderIDAndReservations: a type whose provider ID is not known before the
// apply gets user data that reads it from the metadata URL (Hetzner's by default); the
// kubelet is told the type's overhead, system reservation and eviction thresholds, which are
// what Karpenter's instance type subtracts.
func TestBootstrapProviderIDAndReservations(t *testing.T) {
	for _, tc := range []struct {
		name       string
		providerID string
		from       *v1alpha1.ProviderIDFrom
		wantID     string
		wantURL    string
	}{
		{name: "known", providerID: "sim://claim", wantID: "sim://claim"},
		{name: "hetzner defaults", wantID: "hcloud://" + bootstrap.InstanceIDPlaceholder, wantURL: v1alpha1.DefaultMetadataURL},
		{name: "configured", from: &v1alpha1.ProviderIDFrom{MetadataURL: "http://169.254.169.254/openstack/latest/id", Prefix: "openstack:///"},
			wantID: "openstack:///" + bootstrap.InstanceIDPlaceholder, wantURL: "http://169.254.169.254/openstack/latest/id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(time.Now())
			nc := test.TwoTypeClass()
			nt := &nc.Spec.NodeTypes[0]
			nt.ProviderIDFrom = tc.from
			nt.SystemReserved = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
			nt.EvictionHard = map[string]string{"memory.available": "5%"}
			ca := clusterCA(t)
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(ca).Build()
			unavailable := cloudprovider.NewUnavailableOfferings(clk, time.Minute)
			stage := &bootstrapStage{kube: kube, apiReader: kube, clock: clk, namespace: "fulfiller", serverVersion: testServerVersion, unavailable: unavailable}
			f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim"},
				Spec: v1alpha1.FulfillmentSpec{NodeType: nt.Name, NodeName: "claim", Zone: "a", CapacityType: "on-demand", ProviderID: tc.providerID}}
			s := &claimState{Claim: run.Claim{F: f, Class: nc, NodeType: nt}}
			s.Conds = f.StatusConditions(status.WithClock(clk))
			if _, err := stage.reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			ud := &corev1.Secret{}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: "fulfiller", Name: s.F.Status.UserDataSecret}, ud); err != nil {
				t.Fatal(err)
			}
			data := string(ud.Data[classconfig.UserDataKey])
			jc, err := bootstrap.ParseUserData([]byte(data))
			if err != nil {
				t.Fatal(err)
			}
			if id, _ := jc.NodeRegistration.Arg("provider-id"); id != tc.wantID {
				t.Errorf("provider-id = %q, want %q", id, tc.wantID)
			}
			if reads := strings.Contains(data, "FULFILLER_INSTANCE_ID_URL="); reads != (tc.wantURL != "") || tc.wantURL != "" && !strings.Contains(data, "FULFILLER_INSTANCE_ID_URL='"+tc.wantURL+"'") {
				t.Errorf("user data reads the metadata: %v, want %q:\n%s", reads, tc.wantURL, data)
			}
			for arg, want := range map[string]string{"kube-reserved": "cpu=100m", "system-reserved": "memory=128Mi", "eviction-hard": "memory.available<5%"} {
				if got, _ := jc.NodeRegistration.Arg(arg); got != want {
					t.Errorf("kubelet %s = %q, want %q", arg, got, want)
				}
			}
			// Karpenter's instance type of the node type, from the CloudProvider.
			if err := kube.Create(ctx, nc); err != nil {
				t.Fatal(err)
			}
			pool := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
			pool.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Name: nc.Name}
			its, err := cloudprovider.New(cloudprovider.Options{Kube: kube, Clock: clk, Unavailable: unavailable}).GetInstanceTypes(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			it := its[slices.IndexFunc(its, func(it *karpcloudprovider.InstanceType) bool { return it.Name == nt.Name })]
			// 4Gi - 128Mi - 5% of 4Gi (the kubelet's float32 share)
			wantMem := resource.MustParse("4Gi")
			wantMem.Sub(resource.MustParse("128Mi"))
			wantMem.Sub(*resource.NewQuantity(int64(float64(4<<30)*float64(float32(5)/100)), resource.BinarySI))
			alloc := it.Allocatable()
			if cpu, mem := alloc[corev1.ResourceCPU], alloc[corev1.ResourceMemory]; cpu.String() != "1900m" || mem.Cmp(wantMem) != 0 {
				t.Errorf("Karpenter's allocatable cpu %s memory %s, want 1900m and %s", cpu.String(), mem.String(), wantMem.String())
			}
		})
	}
}

// TestBootstrapNodeBornWithClaimLabels: the kubelet registers the Node with the NodeClaim's
// labels (its NodePool template's and the pool's) over the type's, so nothing has to wait for
// Karpenter to sync them; the labels NodeRestriction refuses, and Karpenter's own progress
// labels, are left out.
func TestBootstrapNodeBornWithClaimLabels(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	nc := test.TwoTypeClass()
	nt := &nc.Spec.NodeTypes[0]
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(clusterCA(t)).Build()
	stage := &bootstrapStage{kube: kube, apiReader: kube, clock: clk, namespace: "fulfiller", serverVersion: testServerVersion, unavailable: cloudprovider.NewUnavailableOfferings(clk, time.Minute)}
	f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim"},
		Spec: v1alpha1.FulfillmentSpec{NodeType: nt.Name, NodeName: "claim", Zone: "a", CapacityType: "on-demand", ProviderID: "sim://claim"}}
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim", Labels: map[string]string{
		karpv1.NodePoolLabelKey:         "general",
		"example.com/team":              "payments",
		corev1.LabelTopologyZone:        "a",
		"node-role.kubernetes.io/infra": "",
		karpv1.NodeRegisteredLabelKey:   "true",
		karpv1.NodeInitializedLabelKey:  "true",
	}}}
	got := renderedNodeLabels(t, stage, &claimState{Claim: run.Claim{F: f, Class: nc, NodeType: nt}, claim: claim})
	for k, want := range map[string]string{
		karpv1.NodePoolLabelKey:        "general",
		"example.com/team":             "payments",
		corev1.LabelTopologyZone:       "a",
		corev1.LabelInstanceTypeStable: nt.Name,
		karpv1.CapacityTypeLabelKey:    "on-demand",
	} {
		if got[k] != want {
			t.Errorf("--node-labels %s=%q, want %q (all: %v)", k, got[k], want, got)
		}
	}
	for _, k := range []string{"node-role.kubernetes.io/infra", karpv1.NodeRegisteredLabelKey, karpv1.NodeInitializedLabelKey} {
		if _, ok := got[k]; ok {
			t.Errorf("--node-labels carries %s: %v", k, got)
		}
	}
}

// renderedNodeLabels runs the bootstrap stage for s and returns the --node-labels of the
// JoinConfiguration it rendered.
func renderedNodeLabels(t *testing.T, stage *bootstrapStage, s *claimState) map[string]string {
	t.Helper()
	ctx := context.Background()
	s.Conds = s.F.StatusConditions(status.WithClock(stage.clock))
	if _, err := stage.reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	ud := &corev1.Secret{}
	if err := stage.kube.Get(ctx, client.ObjectKey{Namespace: stage.namespace, Name: s.F.Status.UserDataSecret}, ud); err != nil {
		t.Fatal(err)
	}
	jc, err := bootstrap.ParseUserData(ud.Data[classconfig.UserDataKey])
	if err != nil {
		t.Fatal(err)
	}
	v, _ := jc.NodeRegistration.Arg("node-labels")
	return bootstrap.ParseNodeLabels(v)
}

// zonedFamily names its nodes' zone by one more label, as Hetzner Cloud's CSI driver does.
type zonedFamily struct{}

func (zonedFamily) Name() string         { return "zoned" }
func (zonedFamily) ZoneLabels() []string { return []string{"csi.example.com/location"} }

// A Node of a family with ZoneLabels is born with them, valued with its zone; a Node of
// another family is not.
func TestBootstrapNodeBornWithZoneLabels(t *testing.T) {
	families, err := family.NewRegistry(zonedFamily{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		family, want string
	}{{"zoned", "nbg1"}, {"", ""}} {
		clk := clocktesting.NewFakeClock(time.Now())
		nc := test.TwoTypeClass()
		nc.Spec.Family = tc.family
		nt := &nc.Spec.NodeTypes[0]
		kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(clusterCA(t)).Build()
		stage := &bootstrapStage{kube: kube, apiReader: kube, clock: clk, namespace: "fulfiller", serverVersion: testServerVersion,
			unavailable: cloudprovider.NewUnavailableOfferings(clk, time.Minute), families: families}
		f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim"},
			Spec: v1alpha1.FulfillmentSpec{NodeType: nt.Name, NodeName: "claim", Zone: "nbg1", CapacityType: "on-demand", ProviderID: "sim://claim"}}
		got := renderedNodeLabels(t, stage, &claimState{Claim: run.Claim{F: f, Class: nc, NodeType: nt}})
		if got["csi.example.com/location"] != tc.want {
			t.Errorf("family %q: --node-labels csi.example.com/location=%q, want %q (%v)", tc.family, got["csi.example.com/location"], tc.want, got)
		}
	}
}

func TestKubeletLabels(t *testing.T) {
	got := kubeletLabels(map[string]string{
		corev1.LabelInstanceTypeStable: "small",
		corev1.LabelTopologyZone:       "a",
		karpv1.CapacityTypeLabelKey:    "on-demand",
		"node-role.kubernetes.io/gpu":  "",
		"kubernetes.io/secret":         "x",
		"example.com/team":             "a",
		"node.kubernetes.io/pool":      "p",
	})
	for _, k := range []string{corev1.LabelInstanceTypeStable, corev1.LabelTopologyZone, karpv1.CapacityTypeLabelKey, "example.com/team", "node.kubernetes.io/pool"} {
		if _, ok := got[k]; !ok {
			t.Errorf("%s was dropped, but NodeRestriction allows it", k)
		}
	}
	for _, k := range []string{"node-role.kubernetes.io/gpu", "kubernetes.io/secret"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s was kept, but NodeRestriction refuses it", k)
		}
	}
}

func TestKubeletArgs(t *testing.T) {
	nc := test.TwoTypeClass()
	nc.Spec.Bootstrap.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "max-pods", Value: "50"}, {Name: "v", Value: "2"}}
	nt := nc.Spec.NodeTypes[0]
	nt.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "max-pods", Value: "200"}, {Name: "cpu-manager-policy", Value: "static"}}
	var got []string
	for _, a := range kubeletArgs(nc, &nt) {
		got = append(got, a.Name+"="+a.Value)
	}
	if strings.Join(got, " ") != "max-pods=200 v=2 cpu-manager-policy=static" {
		t.Errorf("kubelet args %v", got)
	}
}
