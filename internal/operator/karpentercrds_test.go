// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package operator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// nodePoolCRD is a copy of the embedded core's NodePool CRD.
func nodePoolCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	for _, crd := range karpenterapis.CRDs {
		if crd.Name == "nodepools.karpenter.sh" {
			return crd.DeepCopy()
		}
	}
	t.Fatal("the embedded core has no NodePool CRD")
	return nil
}

// changeProperties changes the properties of field (spec, status) in the first version.
func changeProperties(crd *apiextensionsv1.CustomResourceDefinition, field string, change func(map[string]apiextensionsv1.JSONSchemaProps)) {
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties[field]
	change(schema.Properties)
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties[field] = schema
}

func TestCRDDifferences(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*apiextensionsv1.CustomResourceDefinition)
		want   []string
	}{
		{"the same", func(*apiextensionsv1.CustomResourceDefinition) {}, nil},
		{"a field less", func(crd *apiextensionsv1.CustomResourceDefinition) {
			changeProperties(crd, "spec", func(p map[string]apiextensionsv1.JSONSchemaProps) { delete(p, "weight") })
		}, []string{"version v1: spec.weight only in Karpenter core v1.15.0's"}},
		{"a field more", func(crd *apiextensionsv1.CustomResourceDefinition) {
			changeProperties(crd, "spec", func(p map[string]apiextensionsv1.JSONSchemaProps) {
				p["newField"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
			})
		}, []string{"version v1: spec.newField only in the cluster's"}},
		{"a field's type", func(crd *apiextensionsv1.CustomResourceDefinition) {
			changeProperties(crd, "spec", func(p map[string]apiextensionsv1.JSONSchemaProps) {
				w := p["weight"]
				w.Type = "string"
				p["weight"] = w
			})
		}, []string{"version v1: spec.weight (type) differs"}},
		{"a printer column", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Versions[0].AdditionalPrinterColumns[0].JSONPath = ".status.other"
		}, []string{"version v1: additionalPrinterColumns.0.jsonPath differs"}},
		{"another version", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Versions[0].Name = "v1beta1"
		}, []string{"version v1 only in Karpenter core v1.15.0's", "version v1beta1 only in the cluster's"}},
		{"scope", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Scope = apiextensionsv1.NamespaceScoped
		}, []string{"scope differ"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := nodePoolCRD(t)
			got := want.DeepCopy()
			tc.change(got)
			diffs, err := crdDifferences(want, got, "v1.15.0")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(diffs, tc.want) {
				t.Errorf("differences %q, want %q", diffs, tc.want)
			}
		})
	}
}

// TestCheckKarpenterCRDs checks the CRDs a real API server serves: the embedded core's pass
// (after the API server has stored and re-encoded them), a NodePool CRD of another shape and
// a missing CRD are refused with what differs and how to fix it.
func TestCheckKarpenterCRDs(t *testing.T) {
	cp := testenv.StartT(t, testenv.Options{CRDs: karpenterapis.CRDs})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crds := apiextensionsclient.NewForConfigOrDie(cp.Config).ApiextensionsV1().CustomResourceDefinitions()
	// A test binary has no build information of its modules: the version is go.mod's.
	version := testenv.GoModVersion(t, karpenterModule)
	if err := CheckKarpenterCRDs(ctx, crds, karpenterapis.CRDs, version); err != nil {
		t.Fatalf("the embedded core's own CRDs: %v", err)
	}

	// Another version's NodePool: a field this core has is missing, one it lacks is there.
	np, err := crds.Get(ctx, "nodepools.karpenter.sh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changeProperties(np, "status", func(p map[string]apiextensionsv1.JSONSchemaProps) {
		delete(p, "nodeClassObservedGeneration")
		p["olderField"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	})
	np.Annotations[KarpenterCoreVersionAnnotation] = "v1.14.0"
	if _, err := crds.Update(ctx, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A NodeOverlay with a finalizer holds its CRD in deletion until the finalizer goes.
	overlays := dynamic.NewForConfigOrDie(cp.Config).Resource(schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1alpha1", Resource: "nodeoverlays"})
	overlay := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
		"metadata": map[string]any{"name": "held", "finalizers": []any{"example.com/hold"}}, "spec": map[string]any{"requirements": []any{}}}}
	if _, err := overlays.Create(ctx, overlay, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := crds.Delete(ctx, "nodeoverlays.karpenter.sh", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := CheckKarpenterCRDs(ctx, crds, karpenterapis.CRDs, version); err == nil || !strings.Contains(err.Error(), "nodeoverlays.karpenter.sh: being deleted") {
		t.Errorf("a CRD being deleted: %v", err)
	}
	if _, err := overlays.Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the NodeOverlay CRD to be gone", func() bool {
		_, err := crds.Get(ctx, "nodeoverlays.karpenter.sh", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	err = CheckKarpenterCRDs(ctx, crds, karpenterapis.CRDs, version)
	var crdErr *KarpenterCRDError
	if !errors.As(err, &crdErr) {
		t.Fatalf("another version's CRDs: %v, want a *KarpenterCRDError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"the cluster's Karpenter CRDs are not those of Karpenter core " + version + ", which this controller embeds",
		"nodepools.karpenter.sh: version v1: status.nodeClassObservedGeneration only in Karpenter core " + version + "'s, version v1: status.olderField only in the cluster's (it is marked as Karpenter core v1.14.0's)",
		"nodeoverlays.karpenter.sh: not installed",
		"install Karpenter core " + version + "'s CRDs with the fulfiller-crd chart",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	if len(crdErr.Problems) != 2 {
		t.Errorf("problems %q, want the NodePool's and the NodeOverlay's", crdErr.Problems)
	}
}
