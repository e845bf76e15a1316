// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
)

func TestTemplate(t *testing.T) {
	crd := header + "    controller-gen.kubebuilder.io/version: v0.20.1\n  name: nodepools.karpenter.sh\nspec:\n  group: karpenter.sh\n"
	got, err := template([]byte(crd), "sigs.k8s.io/karpenter@v1.15.0 pkg/apis/crds", "make karpenter-crds", []string{karpenterCoreVersion + ": v1.15.0"})
	if err != nil {
		t.Fatal(err)
	}
	want := "# The CRD of sigs.k8s.io/karpenter@v1.15.0 pkg/apis/crds with the chart's annotations, written by hack/crdchart (make karpenter-crds): do not edit.\n" +
		header +
		"    {{- with .Values.additionalAnnotations }}\n    {{- toYaml . | nindent 4 }}\n    {{- end }}\n" +
		"    helm.sh/resource-policy: keep\n    fulfiller.sh/karpenter-core-version: v1.15.0\n" +
		"    controller-gen.kubebuilder.io/version: v0.20.1\n  name: nodepools.karpenter.sh\nspec:\n  group: karpenter.sh\n"
	if string(got) != want {
		t.Errorf("template:\n%s\nwant:\n%s", got, want)
	}
	for name, bad := range map[string]string{
		"no annotations first": "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: x\n",
		"a template delimiter": crd + "        description: '{{ .Values }}'\n",
	} {
		if _, err := template([]byte(bad), "x", "y", nil); err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.Contains(err.Error(), "controller-gen") && !strings.Contains(err.Error(), "delimiters") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
