// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// TestCatalogValidation: the API server accepts a class with either node types or a
// catalogue, and refuses one with both or neither, and a catalogue with a bad selector.
func TestCatalogValidation(t *testing.T) {
	ctx := context.Background()
	kube := apiServer(t)
	types := []v1alpha1.NodeType{{Name: "small",
		Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		Offerings: []v1alpha1.Offering{{Zone: "a", Price: "0.01"}}}}
	gib4 := resource.MustParse("4Gi")
	shared := &v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{CPU: v1alpha1.CPUShared, MinMemory: &gib4}},
		Overrides: []v1alpha1.TypeOverride{{Name: "cx23", Price: "0.005"}}}
	for _, tc := range []struct {
		name    string
		types   []v1alpha1.NodeType
		catalog *v1alpha1.Catalog
		want    string // in the refusal; empty: accepted
	}{
		{name: "types", types: types},
		{name: "catalogue", catalog: shared},
		{name: "both", types: types, catalog: shared, want: "set exactly one of nodeTypes and catalog"},
		{name: "neither", want: "set exactly one of nodeTypes and catalog"},
		{name: "bad cpu kind", catalog: &v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{CPU: "fast"}}}, want: "spec.catalog.select[0].cpu"},
		{name: "no selector", catalog: &v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{}}, want: "spec.catalog.select"},
		{name: "bad price", catalog: &v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{}}, Overrides: []v1alpha1.TypeOverride{{Name: "cx23", Price: "cheap"}}},
			want: "spec.catalog.overrides[0].price"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := &v1alpha1.TofuNodeClass{
				ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(tc.name, " ", "-")},
				Spec: v1alpha1.TofuNodeClassSpec{Family: v1alpha1.FamilyHcloud, Module: v1alpha1.ModuleSource{Source: "/m"},
					Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: "127.0.0.1:6443"}, NodeTypes: tc.types, Catalog: tc.catalog},
			}
			err := kube.Create(ctx, nc)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("create = %v, want a refusal with %q", err, tc.want)
			}
		})
	}
}
