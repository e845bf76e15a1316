// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestOCIModuleLaunches: a class whose module is an OCI module package in a registry on
// loopback launches a node; the registry's certificate reaches the class's fetch and its runs
// through its credentials (SSL_CERT_FILE), as a private registry's CA would.
func TestOCIModuleLaunches(t *testing.T) {
	ctx := ctxFor(t, 6*time.Minute)
	reg := testenv.NewOCIRegistry(t)
	sim := filepath.Join(env.vars["MODULES"], "sim")
	reg.PushModule(sim, "modules/sim", "v1")
	ca := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: "e2e-oci-ca", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
		StringData: map[string]string{"SSL_CERT_FILE": reg.CAFile},
	}
	create(t, ctx, ca)
	defer func() { _ = env.kube.Delete(ctx, ca) }()
	class := nodeClass("e2e-oci", nodeType("oci-small", "0.01", nil))
	class.Spec.Module = v1alpha1.ModuleSource{Source: "oci://" + reg.Host + "/modules/sim?tag=v1"}
	class.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: ca.Name}}
	startScenario(t, ctx, class, nodePool("e2e-oci", "e2e-oci"))
	defer cleanup(t, "oci", "e2e-oci", "e2e-oci")
	create(t, ctx, deployment("oci", "e2e-oci", 1, "500m"))
	f := readyFulfillment(t, ctx, "oci-small")
	want, err := tfrunner.ModuleDigest(sim)
	if err != nil {
		t.Fatal(err)
	}
	if f.Spec.Module != class.Spec.Module.Source || f.Spec.ModuleDigest != want {
		t.Errorf("the claim recorded module %q digest %q, want %q %q", f.Spec.Module, f.Spec.ModuleDigest, class.Spec.Module.Source, want)
	}
}
