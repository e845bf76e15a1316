// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// kubeletKubeconfig is where, in the state dir, the kubelet keeps its client credentials
// (/etc/kubernetes/kubelet.conf on a kubeadm node).
const kubeletKubeconfig = "kubelet.conf"

// loadKubeconfig returns the kubelet's client configuration from an earlier boot, or nil when
// there is none.
func (m *machine) loadKubeconfig() (*rest.Config, error) {
	if m.cfg.StateDir == "" {
		return nil, nil
	}
	data, err := os.ReadFile(filepath.Join(m.cfg.StateDir, kubeletKubeconfig))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", kubeletKubeconfig, err)
	}
	block, _ := pem.Decode(cfg.CertData)
	if block == nil {
		return nil, fmt.Errorf("%s holds no client certificate", kubeletKubeconfig)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the client certificate in %s: %w", kubeletKubeconfig, err)
	}
	if want := "system:node:" + m.nodeName; cert.Subject.CommonName != want {
		return nil, fmt.Errorf("the client certificate in %s is for %s, not %s", kubeletKubeconfig, cert.Subject.CommonName, want)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("the client certificate in %s expired at %s", kubeletKubeconfig, cert.NotAfter.Format(time.RFC3339))
	}
	return cfg, nil
}

// saveKubeconfig keeps the kubelet's credentials in the state dir, readable by the owner only.
func (m *machine) saveKubeconfig(server string, caPEM []byte, creds Credentials) error {
	if m.cfg.StateDir == "" {
		return nil
	}
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"default-cluster": {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificateData: creds.CertPEM, ClientKeyData: creds.KeyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{"default-context": {Cluster: "default-cluster", AuthInfo: "default-auth"}},
		CurrentContext: "default-context",
	}
	data, err := clientcmd.Write(cfg)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", kubeletKubeconfig, err)
	}
	if err := writeFileAtomic(filepath.Join(m.cfg.StateDir, kubeletKubeconfig), data); err != nil {
		return fmt.Errorf("saving the kubelet's credentials: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to path (0600) through a temporary file and a rename.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// kubeletFlags is where, in the state dir, kubeadm leaves the kubelet's flags from the
// JoinConfiguration's nodeRegistration (/var/lib/kubelet/kubeadm-flags.env on a kubeadm
// node): what a restarted kubelet registers with.
const kubeletFlags = "kubeadm-flags.json"

func (m *machine) saveKubeletFlags(reg bootstrap.NodeRegistration) error {
	if m.cfg.StateDir == "" {
		return nil
	}
	data, err := json.Marshal(reg)
	if err != nil {
		return fmt.Errorf("encoding the kubelet's flags: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(m.cfg.StateDir, kubeletFlags), data); err != nil {
		return fmt.Errorf("saving the kubelet's flags: %w", err)
	}
	return nil
}

// resume starts the kubelet from what an earlier boot left on disk: kubeadm's flags and the
// kubelet's credentials. It reports false when the machine never joined.
func (m *machine) resume() (bool, error) {
	if m.cfg.StateDir == "" {
		return false, nil
	}
	data, err := os.ReadFile(filepath.Join(m.cfg.StateDir, kubeletFlags))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var reg bootstrap.NodeRegistration
	if err := json.Unmarshal(data, &reg); err != nil {
		return false, fmt.Errorf("parsing %s: %w", kubeletFlags, err)
	}
	m.nodeName = reg.Name
	if m.nodeName == "" {
		m.nodeName = m.cfg.Name
	}
	cfg, err := m.loadKubeconfig()
	if err != nil || cfg == nil {
		return false, errors.Join(err, errors.New("no usable kubelet credentials on disk"))
	}
	m.join = &bootstrap.JoinConfiguration{APIVersion: bootstrap.JoinAPIVersion, Kind: bootstrap.JoinKind, NodeRegistration: reg}
	m.kubelet = cfg
	return true, nil
}
