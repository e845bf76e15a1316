// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Budget is how many requests an endpoint accepts per interval.
type Budget struct {
	Requests int
	Interval time.Duration
}

func (b Budget) String() string {
	if b.Interval == time.Hour {
		return fmt.Sprintf("%d requests per hour", b.Requests)
	}
	return fmt.Sprintf("%d requests per %s", b.Requests, b.Interval)
}

// Endpoints of the webservice the client calls, named as the documentation heads them.
const (
	EndpointServers      = "GET /server"
	EndpointServer       = "GET /server/{server-number}"
	EndpointResetOptions = "GET /reset/{server-number}"
	EndpointReset        = "POST /reset/{server-number}"
	EndpointRescue       = "GET /boot/{server-number}/rescue"
	EndpointRescueOn     = "POST /boot/{server-number}/rescue"
	EndpointRescueOff    = "DELETE /boot/{server-number}/rescue"
	EndpointRescueLast   = "GET /boot/{server-number}/rescue/last"
	EndpointKeys         = "GET /key"
	EndpointKeyCreate    = "POST /key"
	EndpointKey          = "GET /key/{fingerprint}"
	EndpointKeyDelete    = "DELETE /key/{fingerprint}"
)

// DocumentedBudgets are the request limits the Robot webservice documentation gives for each
// endpoint the client calls (robot.hetzner.com/doc/webservice/en.html, section "Request
// limit" under each endpoint). Each endpoint has its own budget; the two server reads are
// documented separately, but their budget is shared in practice
// (syself/hetzner-cloud-controller-manager#18), so the client counts them together.
func DocumentedBudgets() map[string]Budget {
	return map[string]Budget{
		EndpointServers:      {200, time.Hour},
		EndpointServer:       {200, time.Hour},
		EndpointResetOptions: {500, time.Hour},
		EndpointReset:        {50, time.Hour},
		EndpointRescue:       {500, time.Hour},
		EndpointRescueOn:     {500, time.Hour},
		EndpointRescueOff:    {500, time.Hour},
		EndpointRescueLast:   {500, time.Hour},
		EndpointKeys:         {500, time.Hour},
		EndpointKeyCreate:    {200, time.Hour},
		EndpointKey:          {500, time.Hour},
		EndpointKeyDelete:    {200, time.Hour},
	}
}

// sharedBudgets names endpoints that count against another endpoint's budget.
var sharedBudgets = map[string]string{EndpointServer: EndpointServers}

// window is how long a request counts against the budget here: the interval, and a margin
// (a twentieth of it, at most a second). The webservice counts a request from when it
// arrives, this client from when it sends it; without the margin, a request that arrived
// late keeps counting there after it stopped counting here.
func (b Budget) window() time.Duration {
	return b.Interval + min(b.Interval/20, time.Second)
}

// limiter keeps, per endpoint, the times of the requests sent within the last interval (a
// sliding window, as the webservice counts) and when the webservice last refused one.
type limiter struct {
	clock   clock.Clock
	budgets map[string]Budget
	maxWait time.Duration

	mu      sync.Mutex
	sent    map[string][]time.Time
	blocked map[string]time.Time
}

func newLimiter(c clock.Clock, budgets map[string]Budget, maxWait time.Duration) *limiter {
	return &limiter{clock: c, budgets: budgets, maxWait: maxWait, sent: map[string][]time.Time{}, blocked: map[string]time.Time{}}
}

func (l *limiter) key(endpoint string) string {
	if k, ok := sharedBudgets[endpoint]; ok {
		return k
	}
	return endpoint
}

// wait takes one request from endpoint's budget, waiting for it up to maxWait. When the
// budget frees later than that it returns a *RateLimitedError saying when.
func (l *limiter) wait(ctx context.Context, endpoint string) error {
	for {
		ready, budget, ok := l.take(endpoint)
		if ok {
			return nil
		}
		now := l.clock.Now()
		if ready.Sub(now) > l.maxWait {
			return &RateLimitedError{Endpoint: endpoint, Budget: budget, ResetAt: ready}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.clock.After(ready.Sub(now)):
		}
	}
}

// take records a request now if the budget allows it; otherwise it returns when it will.
func (l *limiter) take(endpoint string) (time.Time, Budget, bool) {
	key := l.key(endpoint)
	budget, limited := l.budgets[key]
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	ready := now
	if b := l.blocked[key]; b.After(ready) {
		ready = b
	}
	if limited && budget.Requests > 0 {
		window := budget.window()
		sent := l.sent[key]
		for len(sent) > 0 && !sent[0].Add(window).After(now) {
			sent = sent[1:]
		}
		l.sent[key] = sent
		if len(sent) >= budget.Requests {
			if r := sent[len(sent)-budget.Requests].Add(window); r.After(ready) {
				ready = r
			}
		}
	}
	if ready.After(now) {
		return ready, budget, false
	}
	if limited {
		l.sent[key] = append(l.sent[key], now)
	}
	return now, budget, true
}

// refused records that the webservice answered RATE_LIMIT_EXCEEDED for endpoint: requests
// made by others with the same account count against the budget, and the webservice does
// not say when a slot frees. A full interval from now is certain: every request counted
// so far has then left the window.
func (l *limiter) refused(endpoint string, apiErr *APIError) *RateLimitedError {
	key := l.key(endpoint)
	budget := l.budgets[key]
	if apiErr.MaxRequest > 0 && apiErr.Interval > 0 {
		budget = Budget{Requests: apiErr.MaxRequest, Interval: time.Duration(apiErr.Interval) * time.Second}
	}
	interval := budget.Interval
	if interval <= 0 {
		interval = time.Hour
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	until := l.clock.Now().Add(interval)
	if until.After(l.blocked[key]) {
		l.blocked[key] = until
	}
	return &RateLimitedError{Endpoint: endpoint, Budget: budget, ResetAt: l.blocked[key], API: apiErr}
}
