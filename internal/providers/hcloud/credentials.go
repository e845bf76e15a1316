package hcloud

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	hcloudgo "github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// The environment variables of a class's credentials that the family reads, as the provider
// and the hcloud CLI do.
const (
	EnvToken    = "HCLOUD_TOKEN"
	EnvEndpoint = "HCLOUD_ENDPOINT"
)

// tokenLength is the length of a Hetzner Cloud API token: the provider refuses any other
// before it makes a request (terraform-provider-hcloud hcloud/provider.go).
const tokenLength = 64

// checkTimeout bounds one credentials check.
const checkTimeout = 15 * time.Second

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
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	_, _, err := apiClient(s.Env).Server.List(ctx, hcloudgo.ServerListOpts{
		ListOpts: hcloudgo.ListOpts{PerPage: 1, LabelSelector: v1alpha1.LabelCluster + "=" + s.Cluster},
	})
	switch {
	case err == nil:
		return nil
	case hcloudgo.IsError(err, hcloudgo.ErrorCodeUnauthorized):
		return family.Errorf(v1alpha1.ReasonInvalidCredentials, "the Hetzner Cloud API refused the class's %s: %s", EnvToken, apiMessage(err))
	case hcloudgo.IsError(err, hcloudgo.ErrorCodeForbidden):
		return family.Errorf(v1alpha1.ReasonInvalidCredentials, "the class's %s may not read servers: %s", EnvToken, apiMessage(err))
	}
	return fmt.Errorf("listing servers at %s: %w", endpoint(s.Env), err)
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

// apiMessage is the API's words of an error answer (message and code), which never hold the
// token.
func apiMessage(err error) string {
	var apiErr hcloudgo.Error
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("%s (%s)", apiErr.Message, apiErr.Code)
	}
	return err.Error()
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

func endpoint(env map[string]string) string {
	if e := env[EnvEndpoint]; e != "" {
		return e
	}
	return hcloudgo.Endpoint
}

// apiClient is an API client with the class's token and endpoint that does not retry: a check
// that fails is made again by the caller, later.
func apiClient(env map[string]string) *hcloudgo.Client {
	return hcloudgo.NewClient(
		hcloudgo.WithToken(env[EnvToken]),
		hcloudgo.WithEndpoint(endpoint(env)),
		hcloudgo.WithApplication("fulfiller", ""),
		hcloudgo.WithRetryOpts(hcloudgo.RetryOpts{MaxRetries: 0}),
		hcloudgo.WithHTTPClient(&http.Client{Timeout: checkTimeout}),
	)
}
