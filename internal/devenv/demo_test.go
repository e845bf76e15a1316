// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package devenv

import (
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
)

// The module wants absolute folders; `make demo` passes a relative --dir.
func TestVarsAreAbsolute(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("env", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(Layout{"env"}.ServerFile(), []byte("127.0.0.1:6443\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars, err := Vars("env", "modules")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"SIM_DIR", "MODULES"} {
		if !filepath.IsAbs(vars[k]) {
			t.Errorf("%s = %q, want an absolute path", k, vars[k])
		}
	}
	if vars["API_SERVER"] != "127.0.0.1:6443" {
		t.Errorf("API_SERVER = %q", vars["API_SERVER"])
	}
}

// With its Hetzner Cloud stand-in the environment's substitutions name its endpoint and
// token, and examples/local-hcloud decodes strictly into the API's types with them: a class
// of modules/hetzner-cloud whose credentials are the stand-in's, its pool, the workload on it.
func TestLocalHcloudExamples(t *testing.T) {
	examples, err := filepath.Abs(filepath.Join("..", "..", "examples", "local-hcloud"))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("env", 0o700); err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string]string{Layout{"env"}.ServerFile(): "127.0.0.1:6443", Layout{"env"}.HcloudFile(): "http://127.0.0.1:4000/v1\n"} {
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	vars, err := Vars("env", "modules")
	if err != nil {
		t.Fatal(err)
	}
	if vars["HCLOUD_ENDPOINT"] != "http://127.0.0.1:4000/v1" || vars["HCLOUD_TOKEN"] != standin.DefaultToken {
		t.Fatalf("HCLOUD_ENDPOINT %q, HCLOUD_TOKEN set %v", vars["HCLOUD_ENDPOINT"], vars["HCLOUD_TOKEN"] != "")
	}
	decode := func(file string, obj any) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(examples, file))
		if err != nil {
			t.Fatal(err)
		}
		expanded := os.Expand(string(data), func(k string) string { return vars[k] })
		json, err := utilyaml.ToJSON([]byte(expanded))
		if err != nil {
			t.Fatal(err)
		}
		if err := sigsyaml.UnmarshalStrict(json, obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	secret, class, pool, workload := &corev1.Secret{}, &v1alpha1.TofuNodeClass{}, &karpv1.NodePool{}, &appsv1.Deployment{}
	decode("credentials.yaml", secret)
	decode("nodeclass.yaml", class)
	decode("nodepool.yaml", pool)
	decode("workload.yaml", workload)
	if secret.StringData["HCLOUD_TOKEN"] != standin.DefaultToken || secret.StringData["HCLOUD_ENDPOINT"] != vars["HCLOUD_ENDPOINT"] ||
		secret.Namespace != Namespace || class.Spec.Credentials[0].SecretName != secret.Name {
		t.Errorf("credentials %s/%s (keys %d) are not the class's (%v) or not the stand-in's", secret.Namespace, secret.Name, len(secret.StringData), class.Spec.Credentials)
	}
	if class.Name != "hcloud" || class.Spec.Family != v1alpha1.FamilyHcloud || class.Spec.Module.Source != filepath.Join(vars["MODULES"], "hetzner-cloud") ||
		class.Spec.Bootstrap.APIServerEndpoint != "127.0.0.1:6443" {
		t.Errorf("class %s: family %q, module %s, API server %s", class.Name, class.Spec.Family, class.Spec.Module.Source, class.Spec.Bootstrap.APIServerEndpoint)
	}
	for _, nt := range class.Spec.NodeTypes {
		if nt.ProviderIDTemplate != "" {
			t.Errorf("node type %s has a provider ID template; its machines read their IDs from the metadata service", nt.Name)
		}
	}
	if pool.Spec.Template.Spec.NodeClassRef.Name != class.Name || workload.Spec.Template.Spec.NodeSelector[karpv1.NodePoolLabelKey] != pool.Name {
		t.Errorf("pool %s of class %s, workload on pool %s", pool.Name, pool.Spec.Template.Spec.NodeClassRef.Name, workload.Spec.Template.Spec.NodeSelector[karpv1.NodePoolLabelKey])
	}
}
