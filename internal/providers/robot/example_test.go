// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot_test

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestExample: examples/hetzner-robot decodes strictly into the API's types, the API server
// admits it, and its pool names only node types the class has.
func TestExample(t *testing.T) {
	t.Parallel()
	objects := map[string]client.Object{
		"credentials.yaml": &corev1.Secret{}, "nodeclass.yaml": &v1alpha1.TofuNodeClass{}, "nodepool.yaml": &karpv1.NodePool{},
	}
	test.ExpectExamplesAdmitted(t, controlPlane.Config, filepath.Join("..", "..", "..", "examples", "hetzner-robot"), objects)
	nc := objects["nodeclass.yaml"].(*v1alpha1.TofuNodeClass)
	if nc.Spec.Family != v1alpha1.FamilyRobot || nc.Spec.Robot == nil || filepath.Base(nc.Spec.Module.Source) != "hetzner-robot" {
		t.Fatalf("class %+v", nc.Spec)
	}
	for _, s := range nc.Spec.Robot.Servers {
		if _, ok := nc.NodeType(s.NodeType); !ok {
			t.Errorf("server %d: node type %s is not in the class", s.Number, s.NodeType)
		}
	}
	for _, d := range nc.Spec.Robot.Discover {
		if _, ok := nc.NodeType(d.NodeType); !ok {
			t.Errorf("discovery %+v: node type %s is not in the class", d, d.NodeType)
		}
	}
}
