package robot_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// TestExample: examples/hetzner-robot decodes strictly into the API's types, the API server
// admits it, and its pool names only node types the class has.
func TestExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	karpenter := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	scheme.AddKnownTypes(karpenter, &karpv1.NodePool{}, &karpv1.NodePoolList{})
	metav1.AddToGroupVersion(scheme, karpenter)
	kube, err := client.New(controlPlane.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fulfiller"}}); err != nil {
		t.Fatal(err)
	}
	objects := map[string]client.Object{
		"credentials.yaml": &corev1.Secret{}, "nodeclass.yaml": &v1alpha1.TofuNodeClass{}, "nodepool.yaml": &karpv1.NodePool{},
	}
	for file, obj := range objects {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "hetzner-robot", file))
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.ToJSON(bytes.TrimSpace(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := sigsyaml.UnmarshalStrict(js, obj); err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if err := kube.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("%s: the API server refuses it: %v", file, err)
		}
	}
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
