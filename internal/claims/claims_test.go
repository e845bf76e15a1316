// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

func testClass() *v1alpha1.TofuNodeClass {
	nt := func(name, cpu string, offerings ...v1alpha1.Offering) v1alpha1.NodeType {
		return v1alpha1.NodeType{
			Name:      name,
			Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("4Gi")},
			Overhead:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Offerings: offerings,
		}
	}
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u", Generation: 1},
		Spec: v1alpha1.TofuNodeClassSpec{
			Module:    v1alpha1.ModuleSource{Source: "/m", Version: "1"},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: "127.0.0.1:6443"},
			NodeTypes: []v1alpha1.NodeType{
				nt("small", "2", v1alpha1.Offering{Zone: "a", Price: "0.01"}, v1alpha1.Offering{Zone: "b", Price: "0.009"}),
				nt("large", "8", v1alpha1.Offering{Zone: "a", Price: "0.04"}),
			},
		},
	}
}

func claimFor(types []string, cpu string) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim"},
		Spec: karpv1.NodeClaimSpec{
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
				{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: types},
				{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
			},
			Resources: karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		},
	}
}

func TestChooseOffering(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	for _, tc := range []struct {
		name        string
		types       []string
		cpu         string
		unavailable [][3]string
		wantType    string
		wantZone    string
		wantErr     bool
	}{
		{name: "cheapest offering wins", types: []string{"small", "large"}, cpu: "1", wantType: "small", wantZone: "b"},
		{name: "requests that do not fit skip a type", types: []string{"small", "large"}, cpu: "3", wantType: "large", wantZone: "a"},
		{name: "unavailable offering is skipped", types: []string{"small", "large"}, cpu: "1",
			unavailable: [][3]string{{"small", "b", karpv1.CapacityTypeOnDemand}}, wantType: "small", wantZone: "a"},
		{name: "nothing launchable", types: []string{"small"}, cpu: "1",
			unavailable: [][3]string{{"small", "a", karpv1.CapacityTypeOnDemand}, {"small", "b", karpv1.CapacityTypeOnDemand}}, wantErr: true},
		{name: "type not allowed by the claim", types: []string{"medium"}, cpu: "1", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := testClass()
			u := NewUnavailableOfferings(clk, time.Minute)
			for _, o := range tc.unavailable {
				u.MarkUnavailable(o[0], o[1], o[2])
			}
			its, err := instanceTypes(nc, u)
			if err != nil {
				t.Fatal(err)
			}
			if len(its) != 2 {
				t.Fatalf("instanceTypes returned %d types, want every type", len(its))
			}
			ch, err := chooseOffering(nc, its, claimFor(tc.types, tc.cpu))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("chose %s/%s, want an error", ch.nodeType.Name, ch.zone)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ch.nodeType.Name != tc.wantType || ch.zone != tc.wantZone || ch.capType != karpv1.CapacityTypeOnDemand {
				t.Errorf("chose %s/%s/%s, want %s/%s", ch.nodeType.Name, ch.zone, ch.capType, tc.wantType, tc.wantZone)
			}
		})
	}
}

func TestUnavailableOfferingsExpire(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	u := NewUnavailableOfferings(clk, time.Minute)
	seq := u.SeqNum()
	u.MarkUnavailable("t", "z", "on-demand")
	if !u.IsUnavailable("t", "z", "on-demand") || u.IsUnavailable("t", "other", "on-demand") {
		t.Fatal("marking did not take, or leaked to another zone")
	}
	if u.SeqNum() == seq {
		t.Error("SeqNum did not change on a mark: cached instance types would go stale")
	}
	clk.Step(time.Minute + time.Second)
	if u.IsUnavailable("t", "z", "on-demand") {
		t.Error("offering still unavailable after the TTL")
	}
}

func TestNodeHashDrift(t *testing.T) {
	nc := testClass()
	nt, _ := nc.NodeType("small")
	base := nodeHash(nc, nt)
	priced := nc.DeepCopy()
	priced.Spec.NodeTypes[0].Offerings[0].Price = "0.5"
	if h := nodeHash(priced, &priced.Spec.NodeTypes[0]); h != base {
		t.Error("a price change drifted running nodes")
	}
	for name, mutate := range map[string]func(*v1alpha1.TofuNodeClass){
		"module version": func(c *v1alpha1.TofuNodeClass) { c.Spec.Module.Version = "2" },
		"class variable": func(c *v1alpha1.TofuNodeClass) { c.Spec.Variables = map[string]string{"image": "new"} },
		"type capacity": func(c *v1alpha1.TofuNodeClass) {
			c.Spec.NodeTypes[0].Capacity[corev1.ResourceCPU] = resource.MustParse("4")
		},
		"k8s version": func(c *v1alpha1.TofuNodeClass) { c.Spec.Bootstrap.KubernetesVersion = "v1.37.0" },
	} {
		changed := nc.DeepCopy()
		mutate(changed)
		if nodeHash(changed, &changed.Spec.NodeTypes[0]) == base {
			t.Errorf("changing the %s did not change the hash", name)
		}
	}
}

func TestPhase(t *testing.T) {
	now := metav1.Now()
	mk := func(deleting bool, runs int, set func(status.ConditionSet)) *v1alpha1.Fulfillment {
		f := &v1alpha1.Fulfillment{}
		if deleting {
			f.DeletionTimestamp = &now
		}
		for range runs {
			f.Status.Runs = append(f.Status.Runs, v1alpha1.Run{Name: "r", Operation: "apply"})
		}
		set(f.StatusConditions())
		return f
	}
	for _, tc := range []struct {
		name, want, reason string
		f                  *v1alpha1.Fulfillment
	}{
		{"new", v1alpha1.PhasePending, "", mk(false, 0, func(c status.ConditionSet) {})},
		{"applying", v1alpha1.PhaseApplying, "Applying", mk(false, 1, func(c status.ConditionSet) {
			c.SetUnknownWithReason(v1alpha1.ConditionApplied, "Applying", "running")
		})},
		{"apply failed", v1alpha1.PhaseFailed, "InsufficientCapacity", mk(false, 1, func(c status.ConditionSet) {
			c.SetFalse(v1alpha1.ConditionApplied, "InsufficientCapacity", "sold out")
		})},
		{"joining", v1alpha1.PhaseJoining, "AwaitingNode", mk(false, 1, func(c status.ConditionSet) {
			c.SetTrue(v1alpha1.ConditionApplied)
			c.SetUnknownWithReason(v1alpha1.ConditionJoined, "AwaitingNode", "waiting")
		})},
		{"join timeout", v1alpha1.PhaseFailed, "JoinTimeout", mk(false, 1, func(c status.ConditionSet) {
			c.SetTrue(v1alpha1.ConditionApplied)
			c.SetFalse(v1alpha1.ConditionJoined, "JoinTimeout", "never joined")
		})},
		{"gating", v1alpha1.PhaseGating, "AwaitingGpu", mk(false, 1, func(c status.ConditionSet) {
			c.SetTrue(v1alpha1.ConditionApplied)
			c.SetTrue(v1alpha1.ConditionJoined)
			c.SetTrue(v1alpha1.ConditionCNIReady)
			c.SetUnknownWithReason(v1alpha1.ConditionGPUReady, "AwaitingGpu", "nvidia.com/gpu allocatable 0 of 1")
		})},
		{"gate missed its deadline", v1alpha1.PhaseDegraded, v1alpha1.ReasonGPUNotRegistered, mk(false, 1, func(c status.ConditionSet) {
			c.SetTrue(v1alpha1.ConditionApplied)
			c.SetTrue(v1alpha1.ConditionJoined)
			c.SetTrue(v1alpha1.ConditionCNIReady)
			c.SetFalse(v1alpha1.ConditionGPUReady, v1alpha1.ReasonGPUNotRegistered, "nvidia.com/gpu allocatable 0 of 1 after 10m")
		})},
		{"ready", v1alpha1.PhaseReady, "", mk(false, 1, func(c status.ConditionSet) {
			for _, t := range []string{v1alpha1.ConditionApplied, v1alpha1.ConditionJoined, v1alpha1.ConditionCNIReady,
				v1alpha1.ConditionGPUReady, v1alpha1.ConditionGatesReady, v1alpha1.ConditionInitialized} {
				c.SetTrue(t)
			}
		})},
		{"destroying", v1alpha1.PhaseDestroying, "Destroying", mk(true, 1, func(c status.ConditionSet) {
			c.SetUnknownWithReason(v1alpha1.ConditionDestroyed, "Destroying", "running")
		})},
	} {
		got, reason, _ := phase(tc.f)
		if got != tc.want || (tc.reason != "" && reason != tc.reason) {
			t.Errorf("%s: phase %s/%s, want %s/%s", tc.name, got, reason, tc.want, tc.reason)
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

func TestValidateSpec(t *testing.T) {
	nc := testClass()
	if err := validateSpec(&nc.Spec, nil); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
	bad := nc.DeepCopy()
	delete(bad.Spec.NodeTypes[0].Capacity, corev1.ResourceMemory)
	bad.Spec.NodeTypes[1].Offerings = append(bad.Spec.NodeTypes[1].Offerings, bad.Spec.NodeTypes[1].Offerings[0])
	bad.Spec.NodeTypes[1].Overhead["nvidia.com/gpu"] = resource.MustParse("1")
	bad.Spec.NodeTypes[1].EvictionHard = map[string]string{"memory.available": "lots"}
	bad.Spec.NodeTypes[0].ProviderIDTemplate = "sim://{name}"
	bad.Spec.NodeTypes[0].ProviderIDFrom = &v1alpha1.ProviderIDFrom{Prefix: "x://"}
	err := validateSpec(&bad.Spec, nil)
	if err == nil {
		t.Fatal("invalid spec accepted")
	}
	for _, want := range []string{"small: capacity.memory", "large: offering a/on-demand listed twice", "large: kube-reserved cannot reserve nvidia.com/gpu",
		"eviction threshold memory.available", "small: providerIDTemplate and providerIDFrom exclude each other"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestTokenExtension(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ttl := 10 * time.Minute
	limit := now.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		expires time.Time
		limit   time.Time
		want    time.Time
		extend  bool
	}{
		{"plenty left", now.Add(6 * time.Minute), limit, now.Add(6 * time.Minute), false},
		{"less than half left", now.Add(4 * time.Minute), limit, now.Add(ttl), true},
		{"capped at the limit", now.Add(time.Minute), now.Add(3 * time.Minute), now.Add(3 * time.Minute), true},
		{"already at the limit", now.Add(time.Minute), now.Add(time.Minute), now.Add(time.Minute), false},
		{"expired tokens stay expired", now.Add(-time.Second), limit, now.Add(-time.Second), false},
	} {
		got, extend := tokenExtension(now, tc.expires, ttl, tc.limit)
		if !got.Equal(tc.want) || extend != tc.extend {
			t.Errorf("%s: tokenExtension = %s, %v; want %s, %v", tc.name, got, extend, tc.want, tc.extend)
		}
	}
}
