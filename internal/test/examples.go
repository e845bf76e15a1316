package test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// ExpectExamplesAdmitted decodes each file of an examples folder strictly into its object
// (objects: file name → an empty object of its type) and has the API server at cfg admit it
// (a dry-run create, in namespace fulfiller, which it creates). A file that does not decode
// or is refused is a test error; the objects hold what was decoded.
func ExpectExamplesAdmitted(t *testing.T, cfg *rest.Config, dir string, objects map[string]client.Object) {
	t.Helper()
	ctx := context.Background()
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
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fulfiller"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for file, obj := range objects {
		data, err := os.ReadFile(filepath.Join(dir, file))
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
}
