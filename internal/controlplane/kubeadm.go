// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// BootstrapperGroup is the group kubeadm gives its default node bootstrap tokens, and the
// group kubeadm's bootstrap RBAC is bound to.
const BootstrapperGroup = bootstrap.DefaultGroup

// kubeadmInit makes the running control plane what `kubeadm init` leaves for joining nodes,
// with kubeadm's own init phases run against it (they only talk to the API server):
//   - upload-config writes kube-system/kubeadm-config (the ClusterConfiguration) and
//     kube-system/kubelet-config (the KubeletConfiguration every joining kubelet gets), and
//     the Roles kubeadm:nodes-kubeadm-config and kubeadm:kubelet-config that let bootstrap
//     tokens and nodes read them;
//   - bootstrap-token binds kubeadm's bootstrapper RBAC (CSR creation and auto-approval,
//     certificate rotation, get nodes) and publishes kube-public/cluster-info, from the
//     admin kubeconfig's cluster, with the Role that lets anonymous clients read it.
//
// The bootstrap-token phase also creates the InitConfiguration's token; it is deleted right
// after, since claims mint their own. The phases' output goes to logs/kubeadm.log.
func (cp *ControlPlane) kubeadmInit(ctx context.Context, kubeadm string, cs kubernetes.Interface) error {
	version, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the API server's version for kubeadm: %w", err)
	}
	server, err := url.Parse(cp.Server)
	if err != nil {
		return fmt.Errorf("parsing the API server URL: %w", err)
	}
	tok, err := bootstrap.NewToken()
	if err != nil {
		return err
	}
	config := filepath.Join(cp.Dir, "kubeadm-init.yaml")
	// kubeadm refuses a loopback advertise address it cannot translate; the address is only
	// kept in the InitConfiguration, which neither phase uploads. A CRI socket is named so
	// that kubeadm does not look for one on this machine.
	doc := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %q
  ttl: 10m0s
  description: the token of kubeadm's bootstrap-token phase for the local control plane (deleted after it)
localAPIEndpoint:
  advertiseAddress: 192.0.2.1
  bindPort: %s
nodeRegistration:
  name: fulfiller-control-plane
  criSocket: unix:///run/containerd/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: fulfiller
kubernetesVersion: %s
controlPlaneEndpoint: %q
certificatesDir: %q
networking:
  serviceSubnet: 10.96.0.0/16
  dnsDomain: cluster.local
`, tok.String(), server.Port(), version.GitVersion, server.Host, filepath.Join(cp.Dir, "pki"))
	if err := os.WriteFile(config, []byte(doc), 0o600); err != nil {
		return fmt.Errorf("writing the kubeadm configuration: %w", err)
	}
	for _, phase := range [][]string{
		{"upload-config", "all"},
		{"bootstrap-token", "--skip-token-print"},
	} {
		args := append(append([]string{"init", "phase"}, phase...), "--config", config, "--kubeconfig", cp.Kubeconfig)
		if err := cp.runKubeadm(ctx, kubeadm, args...); err != nil {
			return err
		}
	}
	err = cs.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, tok.SecretName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the token of kubeadm's bootstrap-token phase: %w", err)
	}
	return nil
}

// runKubeadm runs one kubeadm command, its output appended to logs/kubeadm.log.
func (cp *ControlPlane) runKubeadm(ctx context.Context, kubeadm string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, kubeadm, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	// kubeadm would look for an admin.conf and a kubelet in the default places otherwise.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + cp.Dir}
	err := cmd.Run()
	if log, lerr := os.OpenFile(filepath.Join(cp.Dir, "logs", "kubeadm.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); lerr == nil {
		fmt.Fprintf(log, "$ kubeadm %v\n%s\n", args, out.Bytes())
		log.Close()
	}
	if err != nil {
		return fmt.Errorf("kubeadm %v: %w\n%s", args, err, tail(out.String(), 2000))
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
