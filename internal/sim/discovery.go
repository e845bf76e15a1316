// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// discoveryInterval is how often discovery asks for a signed cluster-info (kubeadm: 5s).
const discoveryInterval = 500 * time.Millisecond

// discover is kubeadm's token discovery: it fetches kube-public/cluster-info anonymously
// without trusting any CA, verifies the detached JWS signature the bootstrap signer added for
// the token, pins the CA in it against caCertHashes and fetches cluster-info a second time
// trusting only that CA. It returns the API server URL (https://<endpoint>) and the CA.
func discover(ctx context.Context, endpoint string, tok bootstrap.Token, caCertHashes []string, log *progress) (string, []byte, error) {
	if len(caCertHashes) == 0 {
		return "", nil, errors.New("discovery: the JoinConfiguration pins no caCertHashes, refusing to trust an unverified CA")
	}
	server := "https://" + endpoint
	insecure, err := kubernetes.NewForConfig(&rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: 10 * time.Second, QPS: -1})
	if err != nil {
		return "", nil, fmt.Errorf("discovery: building client for %s: %w", server, err)
	}
	sigKey := bootstrapapi.JWSSignatureKeyPrefix + tok.ID
	var (
		clusterInfo *corev1.ConfigMap
		lastErr     error
		waiting     bool
	)
	err = wait.PollUntilContextCancel(ctx, discoveryInterval, true, func(ctx context.Context) (bool, error) {
		cm, err := insecure.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil { // not the deadline cutting this very request short
				lastErr = err
			}
			return false, nil
		}
		lastErr = nil
		if cm.Data[sigKey] == "" {
			if !waiting {
				log.printf("discovery: cluster-info is not signed for token %s yet, waiting for the bootstrap signer", tok.ID)
				waiting = true
			}
			return false, nil
		}
		clusterInfo = cm
		return true, nil
	})
	if err != nil {
		if lastErr != nil {
			return "", nil, fmt.Errorf("discovery: fetching %s/%s from %s: %w", metav1.NamespacePublic, bootstrapapi.ConfigMapClusterInfo, server, lastErr)
		}
		return "", nil, fmt.Errorf("discovery: cluster-info at %s carries no signature for token %s (%w): the token does not exist, has expired or may not be used for signing", server, tok.ID, err)
	}
	kubeconfig := clusterInfo.Data[bootstrapapi.KubeConfigKey]
	if err := verifyDetachedJWS(clusterInfo.Data[sigKey], kubeconfig, tok); err != nil {
		return "", nil, fmt.Errorf("discovery: cluster-info signature for token %s: %w: the token secret is wrong, or someone tampers with cluster-info", tok.ID, err)
	}
	caPEM, err := clusterCA(kubeconfig)
	if err != nil {
		return "", nil, fmt.Errorf("discovery: %w", err)
	}
	if err := checkCAPins(caPEM, caCertHashes); err != nil {
		return "", nil, fmt.Errorf("discovery: %w", err)
	}

	// From here on only the pinned CA is trusted: the API server must present a certificate
	// it signed, and serve the same cluster-info.
	secure, err := kubernetes.NewForConfig(&rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}, Timeout: 10 * time.Second, QPS: -1})
	if err != nil {
		return "", nil, fmt.Errorf("discovery: building client for %s: %w", server, err)
	}
	again, err := secure.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("discovery: fetching cluster-info again trusting only the pinned CA: %w", err)
	}
	if again.Data[bootstrapapi.KubeConfigKey] != kubeconfig {
		return "", nil, errors.New("discovery: cluster-info fetched over verified TLS differs from the one fetched first")
	}
	return server, caPEM, nil
}

// clusterCA returns the CA data of the cluster in the cluster-info kubeconfig.
func clusterCA(kubeconfig string) ([]byte, error) {
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("parsing the kubeconfig in cluster-info: %w", err)
	}
	if len(cfg.Clusters) != 1 {
		return nil, fmt.Errorf("the kubeconfig in cluster-info has %d clusters, want 1", len(cfg.Clusters))
	}
	for _, cluster := range cfg.Clusters {
		if len(cluster.CertificateAuthorityData) == 0 {
			return nil, errors.New("the kubeconfig in cluster-info has no CA data")
		}
		return cluster.CertificateAuthorityData, nil
	}
	panic("unreachable")
}

// checkCAPins succeeds when a certificate in caPEM has one of the pinned SPKI hashes.
func checkCAPins(caPEM []byte, pins []string) error {
	var found []string
	remaining := caPEM
	for {
		var block *pem.Block
		block, remaining = pem.Decode(remaining)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		hash, err := bootstrap.CACertHash(pem.EncodeToMemory(block))
		if err != nil {
			return fmt.Errorf("cluster-info CA: %w", err)
		}
		if slices.ContainsFunc(pins, func(pin string) bool { return strings.EqualFold(pin, hash) }) {
			return nil
		}
		found = append(found, hash)
	}
	if len(found) == 0 {
		return errors.New("cluster-info CA holds no PEM certificate")
	}
	return fmt.Errorf("the cluster CA in cluster-info (%s) matches none of the pinned caCertHashes %v: this is not the cluster the JoinConfiguration was made for", strings.Join(found, ", "), pins)
}

var errBadSignature = errors.New("signature does not verify")

// verifyDetachedJWS checks a compact JWS with detached content (RFC 7515 appendix F), as the
// bootstrap signer writes it: HS256 keyed with the token secret, kid = the token ID.
func verifyDetachedJWS(sig, content string, tok bootstrap.Token) error {
	parts := strings.Split(sig, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] != "" || parts[2] == "" {
		return errors.New("signature is not a detached compact JWS")
	}
	headerJSON, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return fmt.Errorf("decoding JWS header: %w", err)
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.NewDecoder(bytes.NewReader(headerJSON)).Decode(&header); err != nil {
		return fmt.Errorf("decoding JWS header: %w", err)
	}
	if header.Alg != "HS256" {
		return fmt.Errorf("JWS algorithm is %q, want HS256", header.Alg)
	}
	if header.Kid != tok.ID {
		return fmt.Errorf("JWS key ID is %q, want %q", header.Kid, tok.ID)
	}
	got, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("decoding JWS signature: %w", err)
	}
	mac := hmac.New(sha256.New, []byte(tok.Secret))
	mac.Write([]byte(parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(content))))
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errBadSignature
	}
	return nil
}
