// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloudrules

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// The environment a class's credentials give its runs: the token, and the API's address
// (the tests point it at the stand-in). The family's own API calls read them too.
const (
	EnvToken    = "HCLOUD_TOKEN"
	EnvEndpoint = "HCLOUD_ENDPOINT"
)

// DefaultEndpoint is the Hetzner Cloud API.
const DefaultEndpoint = "https://api.hetzner.cloud/v1"

// CodeRateLimitExceeded is the API's error code for a project whose request budget is spent.
const CodeRateLimitExceeded = "rate_limit_exceeded"

// headerRateLimitReset is the API's header with the Unix time at which the project's
// request budget is full again (docs.hetzner.cloud "Rate Limiting").
const headerRateLimitReset = "RateLimit-Reset"

// maxRateLimitWait bounds a retry time: the API refills a spent budget gradually, one request
// a second up to 3600 an hour (docs.hetzner.cloud "Rate Limiting"), so it is full again within
// the hour. A reset further away is not the API's (a bogus header, a proxy's) and would stall
// a run indefinitely.
const maxRateLimitWait = time.Hour

var _ tfrunner.RetryTimer = Rules{}

// RetryAfter is when a run that the API's rate limit failed (rate_limit_exceeded) can be
// retried: the RateLimit-Reset of one cheap read made with the run's token (a read that
// the exhausted budget refuses still carries the header). False for other failures, or
// when the API does not say. A reset more than an hour away counts as an hour
// (maxRateLimitWait). The runner calls it (tfrunner.RetryTimer), so it reads the API
// with the standard library only.
func (Rules) RetryAfter(ctx context.Context, errs []tfrunner.Diagnostic, env map[string]string) (time.Time, bool) {
	limited := false
	for _, d := range errs {
		limited = limited || tfrunner.ContainsAnyWord(d.CodeText(), []string{CodeRateLimitExceeded})
	}
	if !limited || env[EnvToken] == "" {
		return time.Time{}, false
	}
	req, err := NewRequest(ctx, http.MethodGet, Endpoint(env)+"/servers?per_page=1", env[EnvToken], AgentRunner)
	if err != nil {
		return time.Time{}, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}, false
	}
	_ = resp.Body.Close()
	reset, err := strconv.ParseInt(resp.Header.Get(headerRateLimitReset), 10, 64)
	if err != nil || reset <= 0 {
		return time.Time{}, false
	}
	at := time.Unix(reset, 0)
	if latest := time.Now().Add(maxRateLimitWait); at.After(latest) {
		at = latest
	}
	return at, true
}

// Endpoint is the API's address that env gives (EnvEndpoint), DefaultEndpoint when none.
func Endpoint(env map[string]string) string {
	if endpoint := strings.TrimSuffix(env[EnvEndpoint], "/"); endpoint != "" {
		return endpoint
	}
	return DefaultEndpoint
}

// The User-Agents of the fulfiller's own requests: the controller's (the family's catalogue,
// credentials checks and inventory) and the runner's (RetryAfter's read). The hcloud
// provider sends its own (hcloud-terraform/<version> hcloud-go/<version>), so that the
// API's requests can be told apart by who made them.
const (
	AgentController = "fulfiller-controller"
	AgentRunner     = "fulfiller-runner"
)

// NewRequest is a request to the API at target (an Endpoint and a path) with token and the
// User-Agent agent, as the family and the runner's rules make them.
func NewRequest(ctx context.Context, method, target, token, agent string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("User-Agent", agent)
	return req, nil
}
