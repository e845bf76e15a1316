// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The subset of kubeadm.k8s.io/v1beta4 JoinConfiguration that a worker join needs. kubeadm's
// own types live in k8s.io/kubernetes, which cannot be imported; these marshal to the same
// YAML.
const (
	JoinAPIVersion = "kubeadm.k8s.io/v1beta4"
	JoinKind       = "JoinConfiguration"
	// JoinConfigPath is where cloud-init writes the JoinConfiguration on the machine.
	JoinConfigPath = "/etc/kubernetes/fulfiller-join.yaml"
)

type JoinConfiguration struct {
	APIVersion       string           `json:"apiVersion"`
	Kind             string           `json:"kind"`
	Discovery        Discovery        `json:"discovery"`
	NodeRegistration NodeRegistration `json:"nodeRegistration"`
}

type Discovery struct {
	BootstrapToken *BootstrapTokenDiscovery `json:"bootstrapToken,omitempty"`
	// TLSBootstrapToken is the token used for TLS bootstrap (defaults to the discovery token).
	TLSBootstrapToken string `json:"tlsBootstrapToken,omitempty"`
}

type BootstrapTokenDiscovery struct {
	Token             string   `json:"token"`
	APIServerEndpoint string   `json:"apiServerEndpoint"`
	CACertHashes      []string `json:"caCertHashes"`
}

type NodeRegistration struct {
	Name             string         `json:"name,omitempty"`
	CRISocket        string         `json:"criSocket,omitempty"`
	Taints           []corev1.Taint `json:"taints"`
	KubeletExtraArgs []Arg          `json:"kubeletExtraArgs,omitempty"`
}

// Arg is one kubelet flag (v1beta4 lists them as name/value pairs).
type Arg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Arg returns the value of the named kubelet argument, if set.
func (n NodeRegistration) Arg(name string) (string, bool) {
	for _, a := range n.KubeletExtraArgs {
		if a.Name == name {
			return a.Value, true
		}
	}
	return "", false
}

// CACertHash is kubeadm's discovery pin: sha256 of the CA certificate's SubjectPublicKeyInfo.
func CACertHash(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("CA is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("parsing CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// JoinSpec is what one machine needs to join as one node.
type JoinSpec struct {
	APIServerEndpoint string // host:port
	Token             Token
	CACertHash        string
	NodeName          string
	ProviderID        string
	Labels            map[string]string // passed as --node-labels; must be allowed by NodeRestriction
	Taints            []corev1.Taint    // registration taints
	// ProviderIDFrom, when set, makes the machine read its provider ID at boot, because it is
	// not known when the user data is rendered (ProviderID is ignored then).
	ProviderIDFrom *ProviderIDSource
	CRISocket      string
	// Reservations become the kubelet's kube-reserved, system-reserved and eviction-hard.
	Reservations     Reservations
	KubeletExtraArgs []Arg
	// Install is how the machine gets its node software.
	Install Install
	// Report, when set, is where the machine reports its boot progress.
	Report *Report
	// ExtraCloudConfig is the user's #cloud-config merged into ours (see mergeCloudConfig).
	ExtraCloudConfig string
	// UserDataLimit is the most bytes the node type's cloud accepts; 0 for no limit.
	UserDataLimit int64
}

// JoinConfiguration builds the kubeadm JoinConfiguration for spec.
func (s JoinSpec) JoinConfiguration() JoinConfiguration {
	providerID := s.ProviderID
	if s.ProviderIDFrom != nil {
		providerID = s.ProviderIDFrom.Prefix + InstanceIDPlaceholder
	}
	args := []Arg{{Name: "provider-id", Value: providerID}}
	if len(s.Labels) > 0 {
		args = append(args, Arg{Name: "node-labels", Value: joinLabels(s.Labels)})
	}
	args = append(args, s.Reservations.KubeletArgs()...)
	args = append(args, s.KubeletExtraArgs...)
	taints := s.Taints
	if taints == nil {
		taints = []corev1.Taint{}
	}
	return JoinConfiguration{
		APIVersion: JoinAPIVersion,
		Kind:       JoinKind,
		Discovery: Discovery{BootstrapToken: &BootstrapTokenDiscovery{
			Token:             s.Token.String(),
			APIServerEndpoint: s.APIServerEndpoint,
			CACertHashes:      []string{s.CACertHash},
		}},
		NodeRegistration: NodeRegistration{Name: s.NodeName, CRISocket: s.CRISocket, Taints: taints, KubeletExtraArgs: args},
	}
}

func joinLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

// ParseNodeLabels parses a --node-labels value.
func ParseNodeLabels(v string) map[string]string {
	labels := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		if k, val, ok := strings.Cut(kv, "="); ok && k != "" {
			labels[k] = val
		}
	}
	return labels
}

// ParseUserData reads the JoinConfiguration back out of user data rendered by RenderUserData
// (what a machine's cloud-init would write to JoinConfigPath).
func ParseUserData(data []byte) (*JoinConfiguration, error) {
	data, err := DecodeUserData(data)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(data, []byte(cloudConfigHeader)) {
		return nil, errors.New("user data is not #cloud-config")
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return nil, fmt.Errorf("parsing cloud-config: %w", err)
	}
	for _, f := range cc.WriteFiles {
		if f.Path != JoinConfigPath {
			continue
		}
		var jc JoinConfiguration
		if err := yaml.UnmarshalStrict([]byte(f.Content), &jc); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", JoinConfigPath, err)
		}
		if jc.APIVersion != JoinAPIVersion || jc.Kind != JoinKind {
			return nil, fmt.Errorf("%s is %s %s, want %s %s", JoinConfigPath, jc.APIVersion, jc.Kind, JoinAPIVersion, JoinKind)
		}
		if jc.Discovery.BootstrapToken == nil {
			return nil, errors.New("JoinConfiguration has no bootstrap token discovery")
		}
		return &jc, nil
	}
	return nil, fmt.Errorf("user data writes no %s", JoinConfigPath)
}
