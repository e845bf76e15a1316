package hcloud

import (
	"context"
	"strconv"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// headerRateLimitReset is the API's header with the Unix time at which the project's
// request budget is full again (docs.hetzner.cloud "Rate Limiting").
const headerRateLimitReset = "RateLimit-Reset"

var _ tfrunner.RetryTimer = Rules{}

// RetryAfter is when a run that the API's rate limit failed (rate_limit_exceeded) can be
// retried: the RateLimit-Reset of one cheap read made with the run's token (a read that
// the exhausted budget refuses still carries the header). False for other failures, or
// when the API does not say.
func (Rules) RetryAfter(ctx context.Context, errs []tfrunner.Diagnostic, env map[string]string) (time.Time, bool) {
	limited := false
	for _, d := range errs {
		limited = limited || tfrunner.ContainsAnyWord(d.CodeText(), []string{codeRateLimitExceeded})
	}
	if !limited || env[EnvToken] == "" {
		return time.Time{}, false
	}
	a, err := newAPI(family.Scope{Env: env})
	if err != nil {
		return time.Time{}, false
	}
	header, _ := a.firstServer(ctx, "")
	reset, err := strconv.ParseInt(header.Get(headerRateLimitReset), 10, 64)
	if err != nil || reset <= 0 {
		return time.Time{}, false
	}
	return time.Unix(reset, 0), true
}
