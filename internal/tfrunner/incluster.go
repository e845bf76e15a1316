// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
)

// ServiceAccountDir is where a pod's service-account token, CA and namespace are mounted.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// ServiceAccountDirEnv overrides ServiceAccountDir for the runner (the Job executor sets it,
// so that a node which mounts the volume elsewhere can say where).
const ServiceAccountDirEnv = "FULFILLER_SERVICE_ACCOUNT_DIR"

// ClusterKubeconfigEnv names, in the environment of tofu and so of a module's provisioners,
// the kubeconfig of the cluster the fulfiller runs in: in a pod, the runner's service account
// (the one the kubernetes state backend gets); for local runs, the controller's
// --runner-kubeconfig. A provisioner that records something in the cluster (Hetzner Robot's
// `fulfiller robot activate`, on its server's Lease) reads it; providers do not, so it never
// becomes a class's provider credentials.
const ClusterKubeconfigEnv = "FULFILLER_KUBECONFIG"

// runnerKubeconfig is where a run in a pod keeps the kubeconfig of its service account.
func runnerKubeconfig(workDir string) string {
	return filepath.Join(workDir, homeSubdir, ".kube", "runner.kubeconfig")
}

// kubeConfigVars are the kubernetes backend's environment settings that name its own
// kubeconfig or in-cluster configuration; when the request sets one of them, the runner
// leaves the backend's authentication alone. KUBE_HOST, KUBE_TOKEN and the other connection
// variables do not count: they are also a kubernetes or kubectl provider's (a KubeVirt
// class's infra cluster), not the state's.
var kubeConfigVars = []string{"KUBE_CONFIG_PATH", "KUBE_CONFIG_PATHS", "KUBE_IN_CLUSTER_CONFIG"}

// shieldedBackendSettings are the kubernetes backend's settings whose defaults come from the
// provider connection variables (KUBE_HOST, KUBE_TOKEN, KUBE_CLIENT_CERT_DATA, ...): set
// explicitly empty, they keep a provider's credentials in the run's environment from
// overriding the backend's own kubeconfig.
var shieldedBackendSettings = []string{"host", "token", "username", "password", "client_certificate", "client_key",
	"cluster_ca_certificate", "config_context", "config_context_auth_info", "config_context_cluster"}

// serviceAccountBackend gives the kubernetes backend the runner's service account in a pod:
// a kubeconfig (written to path) whose server comes from KUBERNETES_SERVICE_HOST/PORT and whose
// token and CA are the mounted files, read by path, so a refreshed token is picked up (the
// backend's in_cluster_config would read the same files, but only at their fixed path). It is
// the backend's explicit config_path, with the settings a provider's environment would
// override emptied (shieldedBackendSettings). It returns the backend unchanged when the run is
// not in a pod or the backend already has a way in.
func serviceAccountBackend(backend Backend, env map[string]string, getenv func(string) string, path string) (Backend, error) {
	if backend.Type != "kubernetes" {
		return backend, nil
	}
	for _, k := range kubeConfigVars {
		if env[k] != "" {
			return backend, nil
		}
	}
	for _, k := range []string{"in_cluster_config", "config_path", "config_paths", "host", "token"} {
		if backend.Config[k] != "" {
			return backend, nil
		}
	}
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return backend, nil
	}
	dir := getenv(ServiceAccountDirEnv)
	if dir == "" {
		dir = ServiceAccountDir
	}
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	for _, f := range []string{token, ca} {
		if _, err := os.Stat(f); err != nil {
			return backend, fmt.Errorf("reading the runner's service account: %w", err)
		}
	}
	server := "https://" + net.JoinHostPort(host, port)
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster:
    server: %q
    certificate-authority: %q
users:
- name: runner
  user:
    tokenFile: %q
contexts:
- name: runner
  context: {cluster: in-cluster, user: runner}
current-context: runner
`, server, ca, token)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return backend, fmt.Errorf("writing the runner's kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		return backend, fmt.Errorf("writing the runner's kubeconfig: %w", err)
	}
	out := backend // its Maps (the state's labels) too
	out.Config = maps.Clone(backend.Config)
	if out.Config == nil {
		out.Config = map[string]string{}
	}
	for _, k := range shieldedBackendSettings {
		out.Config[k] = ""
	}
	out.Config["insecure"] = "false"
	out.Config["config_path"] = path
	return out, nil
}
