// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodecheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Joined is what `kubeadm join phase kubelet-start` left on the machine.
type Joined struct {
	// Flags is /var/lib/kubelet/kubeadm-flags.env: the kubelet's flags, by name.
	Flags map[string]string
	// BootstrapKubeconfig is /etc/kubernetes/bootstrap-kubelet.conf.
	BootstrapKubeconfig []byte
	// KubeletConfig is /var/lib/kubelet/config.yaml, from the cluster's kubelet-config.
	KubeletConfig []byte
	// InstanceConfig is /var/lib/kubelet/instance-config.yaml, this node's own part of the
	// kubelet's configuration (its CRI socket, with kubeadm's NodeLocalCRISocket feature).
	InstanceConfig []byte
	// CA is /etc/kubernetes/pki/ca.crt, the cluster CA discovery pinned.
	CA []byte
	// Output is kubeadm's.
	Output string
}

// kubeletStartScript runs in a private mount namespace: /etc and /var/lib get a writable
// overlay on a tmpfs (so that /etc/kubernetes and /var/lib/kubelet can be mount points without
// touching this machine's), tmpfs go over /etc/kubernetes and /var/lib/kubelet, kubeadm runs,
// and what it wrote is copied out before the namespace, and with it every mount, goes away.
const kubeletStartScript = `set -eu
scratch=$1 out=$2 config=$3 kubeadm=$4
mount --make-rprivate /
mount -t tmpfs -o mode=0700 tmpfs "$scratch"
for d in etc var/lib; do
  mkdir -p "$scratch/$d/upper" "$scratch/$d/work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$scratch/$d/upper,workdir=$scratch/$d/work" "/$d"
done
mkdir -p /etc/kubernetes /var/lib/kubelet
mount -t tmpfs -o mode=0755 tmpfs /etc/kubernetes
mount -t tmpfs -o mode=0700 tmpfs /var/lib/kubelet
rc=0
"$kubeadm" join phase kubelet-start --config "$config" --v=1 || rc=$?
cp -a /etc/kubernetes "$out/etc-kubernetes"
cp -a /var/lib/kubelet "$out/var-lib-kubelet"
exit "$rc"
`

// KubeletStart runs the real `kubeadm join phase kubelet-start --config` with a
// JoinConfiguration, as a machine's cloud-init would, in a private mount namespace (it needs
// root: `unshare -m`) with tmpfs over /etc/kubernetes and /var/lib/kubelet: it discovers the
// cluster with the token (cluster-info and its JWS signature), checks the CA against the
// pin, reads kubeadm's kubeadm-config and kubelet-config with the token and writes the
// kubelet's bootstrap kubeconfig, configuration and flags, which it returns. It starts no
// kubelet (there is none to start). On failure the error carries kubeadm's output.
func (t *Tools) KubeletStart(ctx context.Context, kubernetesVersion string, joinConfig []byte) (*Joined, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("kubeadm join phase kubelet-start runs in a private mount namespace, which needs root (uid %d)", os.Geteuid())
	}
	kubeadm, err := t.KubeadmFor(ctx, kubernetesVersion)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kubelet-start-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	scratch, out, config := filepath.Join(dir, "scratch"), filepath.Join(dir, "out"), filepath.Join(dir, "join.yaml")
	for _, d := range []string{scratch, out} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(config, joinConfig, 0o600); err != nil {
		return nil, err
	}
	var output bytes.Buffer
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c", kubeletStartScript, "kubelet-start", scratch, out, config, kubeadm)
	cmd.Stdout, cmd.Stderr = &output, &output
	// A machine's environment: nothing of the test's own (KUBECONFIG and the like).
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	runErr := cmd.Run()
	j := &Joined{Output: output.String()}
	if runErr != nil {
		return j, fmt.Errorf("kubeadm join phase kubelet-start: %w\n%s", runErr, output.String())
	}
	read := func(p string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(out, p))
		if err != nil {
			return nil, fmt.Errorf("kubeadm join phase kubelet-start left no %s: %w", p, err)
		}
		return data, nil
	}
	flags, err := read("var-lib-kubelet/kubeadm-flags.env")
	if err != nil {
		return j, err
	}
	if j.Flags, err = parseKubeletFlags(string(flags)); err != nil {
		return j, err
	}
	if j.BootstrapKubeconfig, err = read("etc-kubernetes/bootstrap-kubelet.conf"); err != nil {
		return j, err
	}
	if j.KubeletConfig, err = read("var-lib-kubelet/config.yaml"); err != nil {
		return j, err
	}
	if j.CA, err = read("etc-kubernetes/pki/ca.crt"); err != nil {
		return j, err
	}
	if j.InstanceConfig, err = os.ReadFile(filepath.Join(out, "var-lib-kubelet/instance-config.yaml")); err != nil && !os.IsNotExist(err) {
		return j, err
	}
	return j, nil
}

// parseKubeletFlags reads kubeadm-flags.env: KUBELET_KUBEADM_ARGS="--name=value ...", the
// value quoted as Go's %q quotes it (kubeadm's phases/kubelet WriteKubeletArgsToFile).
func parseKubeletFlags(env string) (map[string]string, error) {
	name, quoted, ok := strings.Cut(strings.TrimSpace(env), "=")
	if !ok || name != "KUBELET_KUBEADM_ARGS" {
		return nil, fmt.Errorf("kubeadm-flags.env is not KUBELET_KUBEADM_ARGS=...: %q", env)
	}
	value, err := strconv.Unquote(quoted)
	if err != nil {
		return nil, fmt.Errorf("kubeadm-flags.env: %w", err)
	}
	flags := map[string]string{}
	for _, f := range strings.Fields(value) {
		k, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		flags[k] = v
	}
	return flags, nil
}
