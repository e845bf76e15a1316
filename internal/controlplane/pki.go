// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// keyPair is a certificate and its private key, as parsed objects and as PEM files.
type keyPair struct {
	Cert     *x509.Certificate
	Key      crypto.Signer
	CertFile string
	KeyFile  string
	CertPEM  []byte
	KeyPEM   []byte
}

// pki holds every certificate the control plane needs. It is generated fresh for each
// control plane, the way kubeadm's certs phase does, with ECDSA keys so it takes milliseconds.
type pki struct {
	CA             *keyPair // cluster CA: serves, signs client certificates and kubelet CSRs
	APIServer      *keyPair // kube-apiserver serving certificate
	Admin          *keyPair // system:masters client
	ControllerMgr  *keyPair // system:kube-controller-manager client
	Scheduler      *keyPair // system:kube-scheduler client
	KubeletClient  *keyPair // the apiserver's client certificate towards kubelets
	ServiceAccount *keyPair // service-account token signing key (no certificate)
}

func newPKI(dir string, apiServerIPs []net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pki folder: %w", err)
	}
	p := &pki{}
	var err error
	if p.CA, err = newCert(dir, "ca", nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "fulfiller-test-ca"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}); err != nil {
		return nil, err
	}
	if p.APIServer, err = newCert(dir, "apiserver", p.CA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: apiServerIPs,
	}); err != nil {
		return nil, err
	}
	clients := []struct {
		into *(*keyPair)
		name string
		cn   string
		org  []string
	}{
		{&p.Admin, "admin", "fulfiller-admin", []string{"system:masters"}},
		{&p.ControllerMgr, "controller-manager", "system:kube-controller-manager", nil},
		{&p.Scheduler, "scheduler", "system:kube-scheduler", nil},
		{&p.KubeletClient, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"kubeadm:cluster-admins"}},
	}
	for _, c := range clients {
		kp, err := newCert(dir, c.name, p.CA, &x509.Certificate{
			Subject:     pkix.Name{CommonName: c.cn, Organization: c.org},
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		if err != nil {
			return nil, err
		}
		*c.into = kp
	}
	if p.ServiceAccount, err = newKeyOnly(dir, "sa"); err != nil {
		return nil, err
	}
	return p, nil
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func newKeyOnly(dir, name string) (*keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("encoding public key: %w", err)
	}
	kp := &keyPair{Key: key, KeyPEM: keyPEM, KeyFile: filepath.Join(dir, name+".key"), CertFile: filepath.Join(dir, name+".pub")}
	kp.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	return kp, kp.write()
}

// newCert creates a key and a certificate from tmpl, signed by parent (self-signed when nil).
func newCert(dir, name string, parent *keyPair, tmpl *x509.Certificate) (*keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(10 * 365 * 24 * time.Hour)
	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate %s: %w", name, err)
	}
	kp := &keyPair{
		Cert: cert, Key: key, KeyPEM: keyPEM,
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
	}
	return kp, kp.write()
}

func (kp *keyPair) write() error {
	if err := os.WriteFile(kp.CertFile, kp.CertPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", kp.CertFile, err)
	}
	if err := os.WriteFile(kp.KeyFile, kp.KeyPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", kp.KeyFile, err)
	}
	return nil
}
