package tfrunner

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// ServiceAccountDir is where a pod's service-account token, CA and namespace are mounted.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// ServiceAccountDirEnv overrides ServiceAccountDir for the runner (the Job executor sets it,
// so that a node which mounts the volume elsewhere can say where).
const ServiceAccountDirEnv = "FULFILLER_SERVICE_ACCOUNT_DIR"

// runnerKubeconfig is where a run in a pod keeps the kubeconfig of its service account.
func runnerKubeconfig(workDir string) string {
	return filepath.Join(workDir, homeSubdir, ".kube", "runner.kubeconfig")
}

// kubeAuthVars are the kubernetes backend's environment settings that say how to reach the
// API server; when the request sets any of them, the runner leaves authentication alone.
var kubeAuthVars = []string{"KUBE_CONFIG_PATH", "KUBE_CONFIG_PATHS", "KUBE_HOST", "KUBE_IN_CLUSTER_CONFIG", "KUBE_TOKEN"}

// serviceAccountEnv gives the kubernetes backend the runner's service account in a pod: a
// kubeconfig (written to path) whose server comes from KUBERNETES_SERVICE_HOST/PORT and whose
// token and CA are the mounted files, read by path, so a refreshed token is picked up. The
// backend's in_cluster_config would read the same files, but only at their fixed path. It
// returns nil when the run is not in a pod or the backend already has a way in.
func serviceAccountEnv(backend Backend, env map[string]string, getenv func(string) string, path string) (map[string]string, error) {
	if backend.Type != "kubernetes" {
		return nil, nil
	}
	for _, k := range kubeAuthVars {
		if env[k] != "" {
			return nil, nil
		}
	}
	for _, k := range []string{"in_cluster_config", "config_path", "config_paths", "host", "token"} {
		if backend.Config[k] != "" {
			return nil, nil
		}
	}
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, nil
	}
	dir := getenv(ServiceAccountDirEnv)
	if dir == "" {
		dir = ServiceAccountDir
	}
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	for _, f := range []string{token, ca} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("reading the runner's service account: %w", err)
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
		return nil, fmt.Errorf("writing the runner's kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		return nil, fmt.Errorf("writing the runner's kubeconfig: %w", err)
	}
	return map[string]string{"KUBE_CONFIG_PATH": path}, nil
}
