// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package sim is the simulated machine: what a real server does between power-on and a Ready
// kubelet, faithful where the control plane can tell the difference. It reads the cloud-init
// user data its module received, joins with the bootstrap token in it by TLS bootstrap and
// registers and heartbeats its Node as system:node:<name>.
package sim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
)

// Credentials are a node's client certificate and key.
type Credentials struct {
	CertPEM []byte
	KeyPEM  []byte
}

// TokenConfig is a client configuration that authenticates with a bootstrap token.
func TokenConfig(server string, caPEM []byte, token string) *rest.Config {
	return &rest.Config{Host: server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
}

// NodeConfig is a client configuration that authenticates with a node's client certificate.
func NodeConfig(server string, caPEM []byte, creds Credentials) *rest.Config {
	return &rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertData: creds.CertPEM, KeyData: creds.KeyPEM}}
}

// TLSBootstrap does what a kubelet does with a bootstrap token: it submits a CSR for
// system:node:<nodeName> to the kube-apiserver-client-kubelet signer and waits until
// kube-controller-manager approves and signs it.
func TLSBootstrap(ctx context.Context, bootstrap *rest.Config, nodeName string) (Credentials, error) {
	client, err := kubernetes.NewForConfig(bootstrap)
	if err != nil {
		return Credentials{}, fmt.Errorf("building bootstrap client: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Credentials{}, fmt.Errorf("generating node key: %w", err)
	}
	csrPEM, err := certutil.MakeCSR(key, &pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}, nil, nil)
	if err != nil {
		return Credentials{}, fmt.Errorf("building CSR: %w", err)
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	name, uid, err := csr.RequestCertificateWithContext(ctx, client, csrPEM, "", certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return Credentials{}, fmt.Errorf("submitting CSR: %w", err)
	}
	certPEM, err := csr.WaitForCertificate(ctx, client, name, uid)
	if err != nil {
		return Credentials{}, fmt.Errorf("waiting for CSR %s to be approved and signed: %w", name, err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Credentials{}, fmt.Errorf("encoding node key: %w", err)
	}
	return Credentials{CertPEM: certPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})}, nil
}
