// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// IssueServingCert signs a serving certificate for ips and dns with the cluster CA, as the
// CSR signer does for a kubelet's serving certificate. Stand-ins for node components (a test
// kubelet's log endpoint) serve it.
func (cp *ControlPlane) IssueServingCert(ips []net.IP, dns []string) (certPEM, keyPEM []byte, err error) {
	dir, err := os.MkdirTemp(filepath.Join(cp.Dir, "pki"), "serving-")
	if err != nil {
		return nil, nil, fmt.Errorf("creating serving certificate folder: %w", err)
	}
	name := "serving"
	if len(dns) > 0 {
		name = dns[0]
	}
	kp, err := newCert(dir, "serving", cp.pki.CA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dns,
		IPAddresses: ips,
	})
	if err != nil {
		return nil, nil, err
	}
	return kp.CertPEM, kp.KeyPEM, nil
}
