// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

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
			nc := test.TwoTypeClass()
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
			ch, err := chooseOffering(nc, its, nil, claimFor(tc.types, tc.cpu))
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
	nc := test.TwoTypeClass()
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

// A type that cannot register within Karpenter's window (classconfig.RegistrationFit) is
// listed but not launchable; the others are.
func TestMisfitTypesAreNotLaunchable(t *testing.T) {
	d := func(m time.Duration) *metav1.Duration { return &metav1.Duration{Duration: m} }
	nc := test.TwoTypeClass()
	nc.Spec.NodeTypes[1].Deadlines.Apply = d(14 * time.Minute)
	its, err := instanceTypes(nc, NewUnavailableOfferings(clocktesting.NewFakeClock(time.Now()), time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(its[1].Offerings.Available()) != 0 || len(its[0].Offerings.Available()) == 0 {
		t.Error("a type that cannot register in the window must be listed but not launchable, the others launchable")
	}
}
