// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestExample: examples/hetzner-cloud (its listed and its catalogue class) decodes strictly
// into the API's types and the API server admits it, the NodeClass uses no provider ID template (so machines read theirs
// from the metadata service), and the shipped module keeps the module contract.
func TestExample(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "..", "examples", "hetzner-cloud")
	objects := map[string]client.Object{
		"credentials.yaml": &corev1.Secret{}, "nodeclass.yaml": &v1alpha1.TofuNodeClass{}, "nodepool.yaml": &karpv1.NodePool{},
		"nodeclass-catalog.yaml": &v1alpha1.TofuNodeClass{},
	}
	test.ExpectExamplesAdmitted(t, controlPlane.Config, dir, objects)
	nc := objects["nodeclass.yaml"].(*v1alpha1.TofuNodeClass)
	for _, nt := range nc.Spec.NodeTypes {
		if nt.ProviderIDTemplate != "" {
			t.Errorf("node type %s has a provider ID template; Hetzner Cloud IDs are not known before the apply", nt.Name)
		}
	}
	if filepath.Base(nc.Spec.Module.Source) != "hetzner-cloud" {
		t.Errorf("module source %s", nc.Spec.Module.Source)
	}
	info, err := tfrunner.InspectModule(moduleDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := info.CheckContract(); err != nil {
		t.Error(err)
	}
	for _, v := range tfrunner.ContractVariables {
		if _, ok := info.Variables[v]; !ok {
			t.Errorf("the module does not declare %s", v)
		}
	}
}
