// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestValidateSpecValues: what the class's SpecValid check refuses that would give every
// claim the same provider ID, a node the kubelet cannot register, or a node whose well-known
// labels lie about it: values are checked as Kubernetes checks them.
func TestValidateSpecValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.NodeType, *v1alpha1.TofuNodeClassSpec)
		want   string // in the error; empty: valid
	}{
		{name: "valid", mutate: func(*v1alpha1.NodeType, *v1alpha1.TofuNodeClassSpec) {}},
		{name: "template with {name}", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.ProviderIDTemplate = "kubevirt://{name}"
		}},
		{name: "template without {name}", want: "providerIDTemplate \"kubevirt://vm\" must contain {name}", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.ProviderIDTemplate = "kubevirt://vm"
		}},
		{name: "zone not a label value", want: "offering zone \"eu central\": a valid label must be", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Offerings[0].Zone = "eu central"
		}},
		{name: "label key not a qualified name", want: "label key \"gpu vendor\"", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Labels = map[string]string{"gpu vendor": "nvidia"}
		}},
		{name: "label value with a comma", want: "label example.com/tier value \"a,b\"", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Labels = map[string]string{"example.com/tier": "a,b"}
		}},
		{name: "label value too long", want: "must be no more than 63 bytes", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Labels = map[string]string{"example.com/tier": strings.Repeat("x", 64)}
		}},
		{name: "a custom label", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Labels = map[string]string{"example.com/tier": "gold", "node.kubernetes.io/gpu": "true", "topology.kubernetes.io/region": "eu"}
		}},
		{name: "instance type label", want: "label node.kubernetes.io/instance-type is set by the fulfiller", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Labels = map[string]string{"node.kubernetes.io/instance-type": "big"}
		}},
		{name: "beta zone label", want: "label failure-domain.beta.kubernetes.io/zone is set by the fulfiller", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Labels = map[string]string{"failure-domain.beta.kubernetes.io/zone": "b"}
		}},
		{name: "capacity type, arch, os, nodepool, hostname", want: "label karpenter.sh/capacity-type is set by the fulfiller", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Labels = map[string]string{"karpenter.sh/capacity-type": "spot", "kubernetes.io/arch": "arm64", "kubernetes.io/os": "windows",
				"karpenter.sh/nodepool": "x", "kubernetes.io/hostname": "h"}
		}},
		{name: "karpenter's domain", want: "label karpenter.sh/anything is in a domain Karpenter reserves", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.Labels = map[string]string{"karpenter.sh/anything": "x"}
		}},
		{name: "kubelet arg value with a newline", want: "kubelet arg max-pods: value must be one line", mutate: func(nt *v1alpha1.NodeType, _ *v1alpha1.TofuNodeClassSpec) {
			nt.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "max-pods", Value: "110\n--node-ip=1.2.3.4"}}
		}},
		{name: "class kubelet arg with a control character", want: "bootstrap: kubelet arg v: value must be one line", mutate: func(_ *v1alpha1.NodeType, spec *v1alpha1.TofuNodeClassSpec) {
			spec.Bootstrap.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "v", Value: "2\x00"}}
		}},
		{name: "kubelet arg name not a flag", want: "kubelet arg \"--v\": not a flag name", mutate: func(_ *v1alpha1.NodeType, spec *v1alpha1.TofuNodeClassSpec) {
			spec.Bootstrap.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "--v", Value: "2"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := test.TwoTypeClass()
			tc.mutate(&nc.Spec.NodeTypes[0], &nc.Spec)
			err := validateSpec(&nc.Spec, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validateSpec = %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("validateSpec = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestValidateSpec(t *testing.T) {
	nc := test.TwoTypeClass()
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

// A class may not set the kubelet args the fulfiller sets, nor extra cloud-config that is not
// cloud-config.
func TestValidateSpecReservedKubeletArgs(t *testing.T) {
	nc := test.TwoTypeClass()
	nc.Spec.Bootstrap.KubeletExtraArgs = []v1alpha1.KubeletArg{{Name: "max-pods", Value: "50"}, {Name: "v", Value: "2"}}
	nc.Spec.Bootstrap.KubeletExtraArgs = append(nc.Spec.Bootstrap.KubeletExtraArgs, v1alpha1.KubeletArg{Name: "provider-id", Value: "x"})
	nc.Spec.Bootstrap.ExtraCloudConfig = "#!/bin/sh\n"
	err := validateSpec(&nc.Spec, nil)
	if err == nil || !strings.Contains(err.Error(), "kubelet arg provider-id is set by the fulfiller") || !strings.Contains(err.Error(), "extraCloudConfig") {
		t.Errorf("validateSpec = %v, want the reserved arg and the bad cloud-config named", err)
	}
}

func TestValidateErrorRules(t *testing.T) {
	for _, tc := range []struct {
		name, family, want string
		rules              []v1alpha1.ErrorRule
	}{
		{name: "generic with a code", rules: []v1alpha1.ErrorRule{{Code: "sold_out", Class: "InsufficientCapacity"}}},
		{name: "a bad pattern", rules: []v1alpha1.ErrorRule{{Pattern: "(", Class: "InsufficientCapacity"}}, want: "errorRules: error rule 0: pattern"},
		{name: "with a family", family: v1alpha1.FamilySim, rules: []v1alpha1.ErrorRule{{Code: "x", Class: "QuotaExceeded"}}, want: "errorRules are for a class without a family"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := test.TwoTypeClass()
			nc.Spec.Family, nc.Spec.ErrorRules = tc.family, tc.rules
			err := validateSpec(&nc.Spec, nil)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("validateSpec = %v, want %q", err, tc.want)
			}
		})
	}
}
