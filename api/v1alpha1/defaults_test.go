// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/fulfiller-sh/fulfiller/api/crds"
	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// TestDefaultsLiveOnce: a default is a Go method of the API types. The CRDs carry a default
// only for the fields whose stored value must not change afterwards (where the claims' states
// are: a class's backend, and the backend a Fulfillment recorded from it), and there it is the
// same value the method falls back to.
func TestDefaultsLiveOnce(t *testing.T) {
	var empty v1alpha1.TofuNodeClass
	want := map[string]string{}
	for _, backend := range []string{"spec.backend", "spec.settings.backend"} {
		want[backend+".type"] = string(empty.Spec.Backend.TypeOrDefault())
		want[backend+".pg.schemaName"] = empty.Spec.Backend.PGSchema()
		want[backend+".encryption.method"] = string((&v1alpha1.BackendEncryption{}).MethodOrDefault())
	}
	got := map[string]string{}
	for _, crd := range crds.CRDs() {
		for _, v := range crd.Spec.Versions {
			collectDefaults(t, "", v.Schema.OpenAPIV3Schema, got)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("CRD defaults %v, want exactly %v (any other default belongs in a Go method of the type)", got, want)
	}
}

func collectDefaults(t *testing.T, path string, s *apiextensionsv1.JSONSchemaProps, into map[string]string) {
	t.Helper()
	if s == nil {
		return
	}
	if s.Default != nil {
		var v any
		if err := json.Unmarshal(s.Default.Raw, &v); err != nil {
			t.Fatalf("default of %s: %v", path, err)
		}
		s, _ := v.(string)
		into[path] = s
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		prop := s.Properties[name]
		collectDefaults(t, strings.TrimPrefix(path+"."+name, "."), &prop, into)
	}
	if s.Items != nil {
		collectDefaults(t, path+"[]", s.Items.Schema, into)
	}
}

// The methods fall back to the documented defaults.
func TestDefaultMethods(t *testing.T) {
	var nt v1alpha1.NodeType
	var nc v1alpha1.TofuNodeClass
	var o v1alpha1.Offering
	var r v1alpha1.ReadinessSpec
	var m v1alpha1.NodeConditionMatch
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"deadlines.apply", nt.ApplyDeadline().String(), "4m0s"},
		{"joinTimeout", nt.JoinTimeoutOrDefault().String(), "10m0s"},
		{"deadlines.cni", nt.CNIDeadline().String(), "5m0s"},
		{"deadlines.gpu", nt.GPUDeadline().String(), "10m0s"},
		{"deadlines.custom", nt.CustomDeadline().String(), "10m0s"},
		{"architecture", nt.ArchitectureOrDefault(), "amd64"},
		{"capacityType", o.CapacityTypeOrDefault(), "on-demand"},
		{"bootstrap.tokenTTL", nc.TokenTTL().String(), "30m0s"},
		{"readiness.policy", r.PolicyOrDefault(), v1alpha1.GatePolicyReportOnly},
		{"nodeCondition.status", m.StatusOrDefault(), "True"},
		{"backend.type", nc.Spec.Backend.TypeOrDefault(), v1alpha1.BackendKubernetes},
		{"backend.pg.schemaName", nc.Spec.Backend.PGSchema(), "fulfiller"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s defaults to %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}

func TestShortMessage(t *testing.T) {
	long := strings.Repeat("é", v1alpha1.MaxMessageLength)
	for _, tc := range []struct{ in, want string }{
		{"a  b\n\tc ", "a b c"},
		{strings.Repeat("x", v1alpha1.MaxMessageLength), strings.Repeat("x", v1alpha1.MaxMessageLength)},
		{strings.Repeat("x", v1alpha1.MaxMessageLength+1), strings.Repeat("x", v1alpha1.MaxMessageLength-3) + "…"},
	} {
		if got := v1alpha1.ShortMessage(tc.in); got != tc.want {
			t.Errorf("ShortMessage(%.20q...) = %.20q... (%d bytes)", tc.in, got, len(got))
		}
	}
	got := v1alpha1.ShortMessage(long)
	if len(got) > v1alpha1.MaxMessageLength || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("cut inside a rune or over the bound: %d bytes", len(got))
	}
}
