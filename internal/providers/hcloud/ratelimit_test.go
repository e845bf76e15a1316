// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestRetryAfter: a run that the rate limit failed can be retried when the API's
// RateLimit-Reset says, learnt with one read; other failures have no such bound and cost no
// request.
func TestRetryAfter(t *testing.T) {
	limited := tfrunner.Diagnostic{Severity: "error", Summary: "limit of 3600 requests per hour reached (rate_limit_exceeded, 0123456789abcdef)"}
	locked := tfrunner.Diagnostic{Severity: "error", Summary: "server is locked (locked, 0123456789abcdef)"}
	for _, tc := range []struct {
		name     string
		diag     tfrunner.Diagnostic
		noToken  bool
		want     time.Duration // from now to the reset; 0: no bound
		requests int
	}{
		{name: "rate limited", diag: limited, want: time.Hour, requests: 1},
		{name: "locked", diag: locked},
		{name: "rate limited without a token", diag: limited, noToken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := standin.StartT(t, standin.Options{})
			s.SetRateLimit(3600, time.Hour, 0) // the budget is spent: full again in an hour
			env := map[string]string{EnvToken: s.Token(), EnvEndpoint: s.Endpoint()}
			if tc.noToken {
				delete(env, EnvToken)
			}
			before := time.Now()
			at, ok := hcloudrules.Rules{}.RetryAfter(context.Background(), []tfrunner.Diagnostic{tc.diag}, env)
			if ok != (tc.want > 0) {
				t.Fatalf("RetryAfter() = %s, %v; want a bound: %v", at, ok, tc.want > 0)
			}
			// The header has whole seconds, rounded up.
			if ok && (at.Before(before.Add(tc.want-time.Second)) || at.After(time.Now().Add(tc.want+time.Second))) {
				t.Errorf("RetryAfter() = %s, want %s after %s", at, tc.want, before)
			}
			got := s.Requests()
			if len(got) != tc.requests {
				t.Errorf("requests = %v, want %d", got, tc.requests)
			}
			for _, r := range got {
				if r.Agent != hcloudrules.AgentRunner {
					t.Errorf("%s came from User-Agent %q, want the runner's %q", r, r.Agent, hcloudrules.AgentRunner)
				}
			}
		})
	}
}

// TestRetryAfterBoundedReset (issue 25, defect 12): a RateLimit-Reset far in the future (a
// bogus answer, a proxy's) does not stall a run: the API refills a spent budget within the
// hour, so the retry time is at most an hour away.
func TestRetryAfterBoundedReset(t *testing.T) {
	limited := tfrunner.Diagnostic{Severity: "error", Summary: "limit of 3600 requests per hour reached (rate_limit_exceeded, 0123456789abcdef)"}
	for _, tc := range []struct {
		name  string
		reset time.Duration // from now
		want  time.Duration
	}{
		{name: "ten years", reset: 10 * 365 * 24 * time.Hour, want: time.Hour},
		{name: "two hours", reset: 2 * time.Hour, want: time.Hour},
		{name: "a minute", reset: time.Minute, want: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("RateLimit-Limit", "3600")
				w.Header().Set("RateLimit-Remaining", "0")
				w.Header().Set("RateLimit-Reset", strconv.FormatInt(time.Now().Add(tc.reset).Unix(), 10))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":{"code":"rate_limit_exceeded","message":"limit of 3600 requests per hour reached"}}`))
			}))
			t.Cleanup(api.Close)
			before := time.Now()
			at, ok := hcloudrules.Rules{}.RetryAfter(context.Background(), []tfrunner.Diagnostic{limited}, map[string]string{EnvToken: "t", EnvEndpoint: api.URL})
			if !ok {
				t.Fatal("RetryAfter() gave no time")
			}
			if at.Before(before.Add(tc.want-time.Second)) || at.After(time.Now().Add(tc.want+time.Second)) {
				t.Errorf("RetryAfter() = %s, want %s after %s", at, tc.want, before)
			}
		})
	}
}
