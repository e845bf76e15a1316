package hcloud

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
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestExample: examples/hetzner-cloud (its listed and its catalogue class) decodes strictly
// into the API's types and the API server admits it, the NodeClass uses no provider ID template (so machines read theirs
// from the metadata service), and the shipped module keeps the module contract.
func TestExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join("..", "..", "..", "examples", "hetzner-cloud")
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	// Karpenter's types register themselves in client-go's scheme.
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
		"nodeclass-catalog.yaml": &v1alpha1.TofuNodeClass{},
	}
	for file, obj := range objects {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		json, err := yaml.ToJSON(bytes.TrimSpace(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := sigsyaml.UnmarshalStrict(json, obj); err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if err := kube.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("%s: the API server refuses it: %v", file, err)
		}
	}
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
