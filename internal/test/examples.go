// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

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
	"k8s.io/apimachinery/pkg/util/yaml"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"
)

// ExpectExamplesAdmitted decodes each file of an examples folder strictly into its object
// (objects: file name → an empty object of its type) and has the API server at cfg admit it
// (a dry-run create, in namespace fulfiller, which it creates). A file that does not decode
// or is refused is a test error; the objects hold what was decoded.
func ExpectExamplesAdmitted(t *testing.T, cfg *rest.Config, dir string, objects map[string]client.Object) {
	t.Helper()
	ctx := context.Background()
	// client-go's scheme holds this project's types and Karpenter's: both register there.
	kube, err := client.New(cfg, client.Options{Scheme: clientscheme.Scheme})
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
