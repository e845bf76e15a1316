// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// tokenLength is the length of a Hetzner Cloud API token: the provider refuses any other
// before it makes a request (terraform-provider-hcloud hcloud/provider.go).
const tokenLength = 64

var _ family.CredentialsChecker = (*Family)(nil)

// CheckCredentials checks the class's HCLOUD_TOKEN with one cheap authenticated read (the
// first page of one server of this cluster) at HCLOUD_ENDPOINT (the API's own endpoint when
// unset). A token that is missing, malformed, refused (unauthorized) or may not read servers
// (forbidden) is a *family.Error with reason InvalidCredentials whose message never holds
// the token; any other failure (the API did not answer, its rate limit) means the check
// could not be made. The caller limits how often it runs.
func (*Family) CheckCredentials(ctx context.Context, s family.Scope) error {
	token, ok := s.Env[EnvToken]
	if !ok || token == "" {
		return family.Errorf(v1alpha1.ReasonInvalidCredentials, "no %s (the Hetzner Cloud API token) in the class's credentials (%s)", EnvToken, secretNames(s.Class))
	}
	if err := tokenForm(token); err != nil {
		return family.Errorf(v1alpha1.ReasonInvalidCredentials, "the class's %s %v", EnvToken, err)
	}
	a, err := newAPI(s)
	if err != nil {
		return err
	}
	_, err = a.firstServer(ctx, keys.LabelCluster+"="+s.Cluster)
	switch {
	case err == nil:
		return nil
	case isCode(err, codeUnauthorized):
		return family.Errorf(v1alpha1.ReasonInvalidCredentials, "the Hetzner Cloud API refused the class's %s: %v", EnvToken, err)
	case isCode(err, codeForbidden):
		return family.Errorf(v1alpha1.ReasonInvalidCredentials, "the class's %s may not read servers: %v", EnvToken, err)
	}
	return fmt.Errorf("listing servers at %s: %w", a.endpoint, err)
}

// tokenForm says what is wrong with a token's form, without the token: the provider refuses
// a token of another length, and a trailing newline (a Secret made from a file with echo) is
// the usual cause.
func tokenForm(token string) error {
	if trimmed := strings.TrimSpace(token); trimmed != token {
		return errors.New("has white space around it (a trailing newline?)")
	}
	if len(token) != tokenLength {
		return fmt.Errorf("has %d characters; a Hetzner Cloud API token has %d", len(token), tokenLength)
	}
	for _, r := range token {
		if r <= ' ' || r > '~' {
			return errors.New("has characters a Hetzner Cloud API token has not")
		}
	}
	return nil
}

// secretNames lists the Secrets of the class's spec.credentials.
func secretNames(nc *v1alpha1.TofuNodeClass) string {
	if nc == nil || len(nc.Spec.Credentials) == 0 {
		return "none"
	}
	names := make([]string, 0, len(nc.Spec.Credentials))
	for _, c := range nc.Spec.Credentials {
		names = append(names, "secret "+c.SecretName)
	}
	return strings.Join(names, ", ")
}
