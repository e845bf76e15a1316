// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"strings"
	"testing"

	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// The v3 hash of a fixed class: claims created by any fulfiller since v3 must not drift when
// the fulfiller alone changes. A change here needs a new HashVersion.
func TestNodeHashStable(t *testing.T) {
	nc := test.NodeClass("sim", func(nc *v1alpha1.TofuNodeClass) {
		nc.Spec.Variables = map[string]string{"image": "ubuntu-24.04", "location": "fsn1"}
	})
	if got, want := nodeHash(nc, &nc.Spec.NodeTypes[0]), "a3d6733e132426ea"; got != want {
		t.Errorf("nodeHash = %s, want %s", got, want)
	}
}

func TestDriftReason(t *testing.T) {
	parts := func(changed ...string) string {
		var out []string
		for _, r := range driftReasons {
			d := "00000000"
			for _, c := range changed {
				if c == r.part {
					d = "11111111"
				}
			}
			out = append(out, r.part+"="+d)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name    string
		stamped string
		now     string
		want    cloudprovider.DriftReason
	}{
		{name: "the module", stamped: parts(), now: parts("module"), want: "ModuleDrifted"},
		{name: "a local module's files", stamped: parts(), now: parts("content"), want: "ModuleContentDrifted"},
		{name: "variables and the type, in a fixed order", stamped: parts(), now: parts("type", "variables"), want: "VariablesDrifted,NodeTypeDrifted"},
		{name: "bootstrap", stamped: parts("bootstrap"), now: parts(), want: "BootstrapDrifted"},
		{name: "a claim of an earlier fulfiller, without parts", stamped: "", now: parts("module"), want: ReasonNodeClassDrifted},
		{name: "unparseable parts", stamped: "module", now: parts("module"), want: ReasonNodeClassDrifted},
		{name: "a part missing", stamped: "module=00000000", now: parts("module"), want: ReasonNodeClassDrifted},
		{name: "no part differs", stamped: parts(), now: parts(), want: ReasonNodeClassDrifted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := driftReason(tc.stamped, tc.now); got != tc.want {
				t.Errorf("driftReason(%q, %q) = %q, want %q", tc.stamped, tc.now, got, tc.want)
			}
		})
	}
}

// Every input of the whole hash is in exactly one part: a change that drifts a claim is named.
func TestHashPartsCoverTheHash(t *testing.T) {
	base := test.NodeClass("sim")
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.TofuNodeClass)
		want   cloudprovider.DriftReason
	}{
		{name: "source", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Module.Source = "/modules/other" }, want: "ModuleDrifted"},
		{name: "a variable", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Variables = map[string]string{"image": "x"} }, want: "VariablesDrifted"},
		{name: "the endpoint", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Bootstrap.APIServerEndpoint = "10.0.0.2:6443" }, want: "BootstrapDrifted"},
		{name: "a type's label", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.NodeTypes[0].Labels = map[string]string{"gpu": "none"} }, want: "NodeTypeDrifted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := base.DeepCopy()
			tc.change(nc)
			if nodeHash(nc, &nc.Spec.NodeTypes[0]) == nodeHash(base, &base.Spec.NodeTypes[0]) {
				t.Fatal("the change does not change the hash")
			}
			if got := driftReason(hashParts(base, &base.Spec.NodeTypes[0]), hashParts(nc, &nc.Spec.NodeTypes[0])); got != tc.want {
				t.Errorf("drift reason %q, want %q", got, tc.want)
			}
		})
	}
}
