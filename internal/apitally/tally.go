// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package apitally counts the requests a cloud API stand-in answers, per endpoint (the
// method and the route's template, "GET /servers/{id}", not the path), token, User-Agent
// and status, so that tests and benchmarks can say what a node costs of a cloud's request
// budget and who spent it. A token is known by a short hash (TokenID), never by itself.
//
// It is test and development machinery: the controller binary must not import it.
package apitally

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
)

// Key is one kind of request.
type Key struct {
	// Endpoint is the method and the route's template: "GET /servers/{id}",
	// "POST /servers/{id}/actions/poweron". A request that matched no route is "<method> ?".
	Endpoint string
	// Token is TokenID of the credentials the request came with ("" without any).
	Token string
	// Agent is the request's User-Agent.
	Agent string
	// Status is the answer's HTTP status.
	Status int
}

// Method is the endpoint's method.
func (k Key) Method() string {
	m, _, _ := strings.Cut(k.Endpoint, " ")
	return m
}

// Count is how many requests of one kind were answered.
type Count struct {
	Key
	Requests int
}

// Tally counts requests. The zero value is ready to use; it is safe for concurrent use.
type Tally struct {
	mu sync.Mutex
	n  map[Key]int
}

// Add counts one request.
func (t *Tally) Add(k Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[Key]int{}
	}
	t.n[k]++
}

// Counts returns the counts so far, sorted by endpoint, token, agent and status.
func (t *Tally) Counts() []Count {
	t.mu.Lock()
	out := make([]Count, 0, len(t.n))
	for k, n := range t.n {
		out = append(out, Count{Key: k, Requests: n})
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Count) int {
		return cmp.Or(cmp.Compare(a.Endpoint, b.Endpoint), cmp.Compare(a.Token, b.Token),
			cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.Status, b.Status))
	})
	return out
}

// Minus returns the counts of now that are not in before (an earlier Counts of the same
// tally): what was answered in between. Kinds with no request in between are left out.
func Minus(now, before []Count) []Count {
	earlier := make(map[Key]int, len(before))
	for _, c := range before {
		earlier[c.Key] += c.Requests
	}
	var out []Count
	for _, c := range now {
		if n := c.Requests - earlier[c.Key]; n > 0 {
			out = append(out, Count{Key: c.Key, Requests: n})
		}
	}
	return out
}

// Sum is the number of requests of the counts that match (all when match is nil).
func Sum(counts []Count, match func(Key) bool) int {
	n := 0
	for _, c := range counts {
		if match == nil || match(c.Key) {
			n += c.Requests
		}
	}
	return n
}

// TokenID is a short name of a secret (a token, a user and password) that tells two apart
// without holding either: the first 8 hexadecimal digits of its SHA-256, "" for none.
func TokenID(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:4])
}
