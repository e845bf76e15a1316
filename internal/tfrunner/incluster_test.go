// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestServiceAccountBackend(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("sa-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("CA PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	inPod := map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443", ServiceAccountDirEnv: dir}
	getenv := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	kube := Backend{Type: "kubernetes", Config: map[string]string{"secret_suffix": "c", "namespace": "n"},
		Maps: map[string]map[string]string{"labels": {"fulfiller.sh/nodeclaim-uid": "u1"}}}

	path := filepath.Join(t.TempDir(), "home", ".kube", "config")
	// A provider's connection variables (a KubeVirt class's infra cluster) in the run's
	// environment: the backend still gets the runner's service account, and every setting
	// those variables would override is set empty.
	providerEnv := map[string]string{"KUBE_HOST": "https://infra:6443", "KUBE_TOKEN": "infra-token", "KUBE_CLUSTER_CA_CERT_DATA": "INFRA CA"}
	got, err := serviceAccountBackend(kube, providerEnv, getenv(inPod), path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config["config_path"] != path || got.Config["secret_suffix"] != "c" || got.Config["namespace"] != "n" || got.Config["insecure"] != "false" {
		t.Fatalf("backend in a pod = %v", got.Config)
	}
	if !reflect.DeepEqual(got.Maps, kube.Maps) {
		t.Errorf("backend maps in a pod = %v, want the request's %v (the state's labels)", got.Maps, kube.Maps)
	}
	for _, k := range []string{"host", "token", "cluster_ca_certificate", "client_certificate", "client_key", "username", "password"} {
		if v, ok := got.Config[k]; !ok || v != "" {
			t.Errorf("backend setting %s = %q (set: %v), want set empty", k, v, ok)
		}
	}
	if _, ok := kube.Config["config_path"]; ok {
		t.Error("the request's backend was changed")
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rest.Host != "https://10.0.0.1:443" || rest.BearerTokenFile != filepath.Join(dir, "token") || rest.TLSClientConfig.CAFile != filepath.Join(dir, "ca.crt") {
		t.Errorf("kubeconfig: host %s, token file %s, CA %s", rest.Host, rest.BearerTokenFile, rest.TLSClientConfig.CAFile)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode: %v, %v", info, err)
	}
	for name, tc := range map[string]struct {
		backend Backend
		env     map[string]string
		getenv  map[string]string
	}{
		"not in a pod":          {kube, map[string]string{}, map[string]string{}},
		"another backend":       {Backend{Type: "pg"}, map[string]string{}, inPod},
		"kubeconfig given":      {kube, map[string]string{"KUBE_CONFIG_PATH": "/k"}, inPod},
		"in-cluster configured": {Backend{Type: "kubernetes", Config: map[string]string{"in_cluster_config": "true"}}, map[string]string{}, inPod},
	} {
		if got, err := serviceAccountBackend(tc.backend, tc.env, getenv(tc.getenv), path); err != nil || !reflect.DeepEqual(got, tc.backend) {
			t.Errorf("%s: backend %v, err %v; want it unchanged", name, got, err)
		}
	}
	missing := map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443", ServiceAccountDirEnv: t.TempDir()}
	if _, err := serviceAccountBackend(kube, map[string]string{}, getenv(missing), path); err == nil {
		t.Error("a pod without its token mounted: no error")
	}
}
