// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"net/http"
	"strings"
	"time"
)

// bucket is the project's request budget (docs.hetzner.cloud "Rate Limiting"): limit
// requests per window, refilled evenly; every request, authenticated or not, takes one.
type bucket struct {
	limit     int
	window    time.Duration
	remaining float64
	last      time.Time
}

func newBucket(limit int, window time.Duration, now time.Time) bucket {
	return bucket{limit: limit, window: window, remaining: float64(limit), last: now}
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.last) {
		b.remaining = min(float64(b.limit), b.remaining+now.Sub(b.last).Seconds()*float64(b.limit)/b.window.Seconds())
		b.last = now
	}
}

// take spends one request if one is left. It returns the headers' values: the limit, the
// requests remaining and when the budget is full again.
func (b *bucket) take(now time.Time) (limit, remaining int, reset time.Time, ok bool) {
	b.refill(now)
	if b.remaining >= 1 {
		b.remaining--
		ok = true
	}
	missing := float64(b.limit) - b.remaining
	reset = now.Add(time.Duration(missing / float64(b.limit) * float64(b.window)))
	if reset.Sub(now) > 0 && reset.Truncate(time.Second) != reset {
		reset = reset.Truncate(time.Second).Add(time.Second)
	}
	return b.limit, int(b.remaining), reset, ok
}

// Failure makes requests fail as the API fails when something is wrong on its side.
type Failure struct {
	// Times is how many matching requests fail (at least 1).
	Times int
	// Method and PathPrefix (without /v1, e.g. "/servers") select the requests; empty
	// matches all.
	Method, PathPrefix string
	// Code is the API error code of the answer (server_error, service_error, conflict,
	// maintenance, timeout, ...). With Code empty, Status is answered with a plain-text body,
	// as a gateway in front of the API does (502, 504).
	Code   string
	Status int
}

func (f *Failure) matches(r *http.Request) bool {
	return (f.Method == "" || f.Method == r.Method) &&
		(f.PathPrefix == "" || strings.HasPrefix(strings.TrimPrefix(r.URL.Path, "/v1"), f.PathPrefix))
}

func (f *Failure) write(w http.ResponseWriter) {
	if f.Code != "" {
		writeError(w, newError(f.Code, "%s", strings.ReplaceAll(f.Code, "_", " ")))
		return
	}
	status := f.Status
	if status == 0 {
		status = http.StatusBadGateway
	}
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(status)
	_, _ = w.Write([]byte("<html><body><h1>" + http.StatusText(status) + "</h1></body></html>\n"))
}

type offering struct{ serverType, location string }

// faults are the switches tests turn; guarded by StandIn.mu.
type faults struct {
	stockouts      map[offering]bool
	placement      map[offering]bool
	serverLimit    int
	createDuration time.Duration
	actionDuration time.Duration
	failures       []*Failure
}

func newFaults(createDuration, actionDuration time.Duration) faults {
	return faults{stockouts: map[offering]bool{}, placement: map[offering]bool{}, createDuration: createDuration, actionDuration: actionDuration}
}

// nextFailure returns the failure the request gets, if any, and counts it.
func (f *faults) nextFailure(r *http.Request) *Failure {
	for i, fail := range f.failures {
		if fail.matches(r) {
			fail.Times--
			if fail.Times <= 0 {
				f.failures = append(f.failures[:i], f.failures[i+1:]...)
			}
			copied := *fail
			return &copied
		}
	}
	return nil
}

// SetStockout makes a server type sold out in a location (or available again): creating
// one there fails with resource_unavailable, and /server_types shows it unavailable there.
func (s *StandIn) SetStockout(serverType, location string, soldOut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if soldOut {
		s.faults.stockouts[offering{serverType, location}] = true
	} else {
		delete(s.faults.stockouts, offering{serverType, location})
	}
}

// SetPlacementFailure makes creating a server type in a location fail with placement_error
// (or succeed again).
func (s *StandIn) SetPlacementFailure(serverType, location string, fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fail {
		s.faults.placement[offering{serverType, location}] = true
	} else {
		delete(s.faults.placement, offering{serverType, location})
	}
}

// SetServerLimit sets the project's server quota (0: none): creating a server beyond it
// fails with resource_limit_exceeded.
func (s *StandIn) SetServerLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.serverLimit = n
}

// SetCreateDuration sets how long create actions of new servers run.
func (s *StandIn) SetCreateDuration(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.createDuration = d
}

// SetActionDuration sets how long every later action other than a create runs.
func (s *StandIn) SetActionDuration(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.actionDuration = d
}

// Fail makes the next f.Times requests that match f fail (after the rate limit and the
// token check).
func (s *StandIn) Fail(f Failure) {
	if f.Times < 1 {
		f.Times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.failures = append(s.faults.failures, &f)
}

// ClearFailures drops the failures Fail set that have not happened yet: the API recovers.
func (s *StandIn) ClearFailures() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.failures = nil
}

// RevokeToken makes the project's token invalid: every request is answered unauthorized.
func (s *StandIn) RevokeToken() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked = true
}

// SetRateLimit sets the project's request budget: limit requests per window, of which
// remaining are left now; the budget refills evenly over the window.
func (s *StandIn) SetRateLimit(limit int, window time.Duration, remaining int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.budget = newBucket(limit, window, time.Now())
	s.budget.remaining = float64(min(remaining, limit))
}
