// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package bootstrap mints the short-lived kubeadm bootstrap tokens that machines join with,
// computes discovery data (CA hash) and renders the JoinConfiguration and cloud-init user data.
package bootstrap

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	tokenutil "k8s.io/cluster-bootstrap/token/util"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// DefaultGroup is the extra group kubeadm gives node bootstrap tokens; kubeadm's bootstrap
// RBAC (CSR creation and auto-approval) is bound to it.
const DefaultGroup = "system:bootstrappers:kubeadm:default-node-token"

// ReportGroup is the extra group of a claim's bootstrap token that lets its machine report
// its boot to the claim's BootReport, and to no other (reportaccess).
const ReportGroup = "system:bootstrappers:fulfiller:boot-report"

// Token is a bootstrap token, <id>.<secret>. Its String form is a credential: never log it.
type Token struct {
	ID     string
	Secret string
}

// NewToken generates a random token from crypto/rand.
func NewToken() (Token, error) {
	s, err := tokenutil.GenerateBootstrapToken()
	if err != nil {
		return Token{}, fmt.Errorf("generating bootstrap token: %w", err)
	}
	return ParseToken(s)
}

// ParseToken parses and validates <id>.<secret>.
func ParseToken(s string) (Token, error) {
	if !tokenutil.IsValidBootstrapToken(s) {
		return Token{}, fmt.Errorf("invalid bootstrap token: want %s", bootstrapapi.BootstrapTokenPattern)
	}
	id, secret, _ := strings.Cut(s, ".")
	return Token{ID: id, Secret: secret}, nil
}

// String returns the bearer credential <id>.<secret>.
func (t Token) String() string { return tokenutil.TokenFromIDAndSecret(t.ID, t.Secret) }

// SecretName is the name of the token's Secret in kube-system.
func (t Token) SecretName() string { return tokenutil.BootstrapTokenSecretName(t.ID) }

// Username is the user the API server authenticates the token as.
func (t Token) Username() string { return bootstrapapi.BootstrapUserPrefix + t.ID }

// TokenSecretOptions describe a token Secret.
type TokenSecretOptions struct {
	Expires     time.Time
	Description string
	Labels      map[string]string
	// Groups are the extra groups; DefaultGroup when empty.
	Groups []string
}

// TokenSecret builds the kube-system Secret that makes the API server accept the token for
// authentication (and the bootstrap signer sign cluster-info with it) until it expires. It
// carries opts.Labels and keys.LabelManagedBy (only the token Secrets it marks are ever
// revoked or collected).
func TokenSecret(t Token, opts TokenSecretOptions) *corev1.Secret {
	groups := opts.Groups
	if len(groups) == 0 {
		groups = []string{DefaultGroup}
	}
	labels := map[string]string{keys.LabelManagedBy: keys.ManagedBy}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem,
			Name:      t.SecretName(),
			Labels:    labels,
		},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               t.ID,
			bootstrapapi.BootstrapTokenSecretKey:           t.Secret,
			bootstrapapi.BootstrapTokenExpirationKey:       opts.Expires.UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenDescriptionKey:      opts.Description,
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      strings.Join(groups, ","),
		},
	}
}
