// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package standin is a stand-in for the Hetzner Cloud API, for tests and the local
// environment: an HTTP server with an in-memory project that follows the public API
// (docs.hetzner.cloud) closely enough that the official OpenTofu provider and hcloud-go
// cannot tell the difference — the JSON shapes, the paths and query parameters, pagination,
// the error envelope and codes, rate limiting with its headers, and actions that progress
// over time. Every server it starts boots a machine (Machines), from exactly the user data
// it was created with, and it serves each server's instance metadata.
//
// Point a client at Endpoint() (HCLOUD_ENDPOINT) with Token() (HCLOUD_TOKEN). Faults —
// stockouts, quotas, placement errors, slow actions, failing requests, a revoked token, an
// exhausted request budget — are switched on through methods.
//
// It is test and development machinery: the controller binary must not import it.
package standin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/apitally"
)

// Options configure a stand-in.
type Options struct {
	// Addr is where it listens (default 127.0.0.1:0, a free port).
	Addr string
	// FirstServerID, when set, makes this stand-in number its servers from it on its own,
	// for a test whose fixtures hold server IDs; by default they come from the sequence all
	// stand-ins of the process share (serverIDs), so that no two machines get one provider ID.
	FirstServerID int64
	// Token is the project's API token (default DefaultToken).
	Token string
	// Catalog is what the project can order (default DefaultCatalog()).
	Catalog *Catalog
	// CreateDuration is how long a server's create action runs (default 1s); ActionDuration
	// how long every other action runs, a server's start included (default 500ms).
	CreateDuration, ActionDuration time.Duration
	// RateLimit is the project's request budget per RateLimitWindow (defaults 3600 per hour,
	// the API's default); the budget refills evenly over the window.
	RateLimit       int
	RateLimitWindow time.Duration
	// Machines boots a machine for every server that starts and powers it off when the server
	// stops or is deleted; nil: servers have no machines.
	Machines Machines
	// Log receives one line per API request and per machine event; nil discards them.
	Log io.Writer
}

// DefaultToken is the API token of a stand-in whose Options name none. Like a real one it
// has 64 characters (the provider refuses other lengths before any request).
const DefaultToken = "StandInProjectToken000000000000000000000000000000000000000000000"

// Default durations.
const (
	DefaultCreateDuration = time.Second
	DefaultActionDuration = 500 * time.Millisecond
)

func (o Options) withDefaults() Options {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Token == "" {
		o.Token = DefaultToken
	}
	if o.Catalog == nil {
		o.Catalog = DefaultCatalog()
	}
	if o.CreateDuration <= 0 {
		o.CreateDuration = DefaultCreateDuration
	}
	if o.ActionDuration <= 0 {
		o.ActionDuration = DefaultActionDuration
	}
	if o.RateLimit <= 0 {
		o.RateLimit = 3600
	}
	if o.RateLimitWindow <= 0 {
		o.RateLimitWindow = time.Hour
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// StandIn is a running Hetzner Cloud API stand-in with one project.
type StandIn struct {
	opts     Options
	listener net.Listener
	server   *http.Server
	base     string // http://host:port
	mux      *http.ServeMux
	closing  chan struct{}
	work     sync.WaitGroup // action goroutines and machine calls

	mu              sync.Mutex
	closed          bool
	lastID          map[string]int64
	servers         map[int64]*server
	actions         map[int64]*action
	networks        map[int64]*network
	firewalls       map[int64]*firewall
	placementGroups map[int64]*placementGroup
	sshKeys         map[int64]*sshKey
	token           string
	revoked         bool
	budget          bucket
	faults          faults
	requests        []Request
	tally           apitally.Tally
	addresses       int
	afterCreate     func(Server)
}

// Start starts a stand-in listening on opts.Addr. Close it when done.
func Start(opts Options) (*StandIn, error) {
	opts = opts.withDefaults()
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("starting the hcloud stand-in: %w", err)
	}
	s := &StandIn{
		opts:     opts,
		listener: ln,
		base:     "http://" + ln.Addr().String(),
		closing:  make(chan struct{}),
		lastID: map[string]int64{
			"server": opts.FirstServerID - 1, "action": 4_000_000_000, "network": 2_000_000, "firewall": 1_000_000,
			"placement_group": 300_000, "ssh_key": 9_000_000, "primary_ip": 80_000_000,
		},
		servers:         map[int64]*server{},
		actions:         map[int64]*action{},
		networks:        map[int64]*network{},
		firewalls:       map[int64]*firewall{},
		placementGroups: map[int64]*placementGroup{},
		sshKeys:         map[int64]*sshKey{},
		token:           opts.Token,
		budget:          newBucket(opts.RateLimit, opts.RateLimitWindow, time.Now()),
		faults:          newFaults(opts.CreateDuration, opts.ActionDuration),
	}
	s.routes()
	s.server = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.server.Serve(ln) }()
	return s, nil
}

// Serve runs a stand-in on addr until ctx ends, then closes it (powering off every
// machine). It is what the local environment runs.
func Serve(ctx context.Context, addr string, opts Options, ready func(*StandIn)) error {
	opts.Addr = addr
	s, err := Start(opts)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(s)
	}
	<-ctx.Done()
	return s.Close()
}

// TB is the part of testing.TB that StartT needs.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// StartT starts a stand-in for a test and closes it when the test ends.
func StartT(t TB, opts Options) *StandIn {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// URL is the stand-in's base URL (http://host:port).
func (s *StandIn) URL() string { return s.base }

// Endpoint is the API's base URL, what HCLOUD_ENDPOINT is set to: URL()/v1.
func (s *StandIn) Endpoint() string { return s.base + "/v1" }

// Token is the project's API token (what HCLOUD_TOKEN is set to).
func (s *StandIn) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

// MetadataURL is the base URL that stands for http://169.254.169.254 on the server's
// network: its metadata is at MetadataURL(id)/hetzner/v1/metadata.
func (s *StandIn) MetadataURL(serverID int64) string {
	return fmt.Sprintf("%s/metadata/%d", s.base, serverID)
}

// Close stops the server, waits for running actions to end and powers off (removes) the
// machine of every server left.
func (s *StandIn) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.server.Shutdown(ctx)
	s.work.Wait()
	s.mu.Lock()
	var on []int64
	for id, srv := range s.servers {
		if srv.machineOn {
			on = append(on, id)
			srv.machineOn = false
		}
	}
	s.mu.Unlock()
	var errs []error
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	if s.opts.Machines != nil {
		for _, id := range on {
			if err := s.opts.Machines.Remove(id); err != nil {
				errs = append(errs, fmt.Errorf("removing the machine of server %d: %w", id, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Request is one API request the stand-in answered.
type Request struct {
	Time   time.Time
	Method string
	// Path is the path without the /v1 prefix, with the query (GET /servers?name=x).
	Path   string
	Status int
	// Code is the error code of an error answer.
	Code string
	// Endpoint is the method and the route's template (GET /servers/{id}); Token the
	// request's token by apitally.TokenID; Agent its User-Agent.
	Endpoint, Token, Agent string
}

func (r Request) String() string {
	s := fmt.Sprintf("%s %s -> %d", r.Method, r.Path, r.Status)
	if r.Code != "" {
		s += " " + r.Code
	}
	return s
}

// Requests returns the API requests answered so far, in order.
func (s *StandIn) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Counts returns how many API requests were answered so far per endpoint (the method and
// the route's template: GET /servers/{id}, POST /servers/{id}/actions/poweron), token (by
// apitally.TokenID), User-Agent and status, rate-limited and refused ones included. The
// metadata service's requests are not the API's and are not counted.
func (s *StandIn) Counts() []apitally.Count { return s.tally.Counts() }

// endpoint is the method and route template of an API request ("GET ?" when none matches):
// the mux's pattern without /v1, with a server action's name in place of {action}, since
// each action is an endpoint of its own.
func (s *StandIn) endpoint(r *http.Request) string {
	_, pattern := s.mux.Handler(r)
	method, route, ok := strings.Cut(pattern, " ")
	if !ok || !strings.HasPrefix(route, "/v1/") {
		return r.Method + " ?"
	}
	route = strings.TrimPrefix(route, "/v1")
	if strings.Contains(route, "{action}") {
		action := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		route = strings.Replace(route, "{action}", action, 1)
	}
	return method + " " + route
}

// bearer is the token of a request's Authorization header.
func bearer(r *http.Request) string {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return token
}

// ServeHTTP answers API requests under /v1 (rate limited and authenticated) and the
// servers' metadata under /metadata/<server-id>/.
func (s *StandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/metadata/") {
		s.serveMetadata(w, r)
		return
	}
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	w = rec
	w.Header().Set("X-Correlation-Id", correlationID())
	defer func() {
		path := strings.TrimPrefix(r.URL.Path, "/v1")
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		req := Request{Time: time.Now(), Method: r.Method, Path: path, Status: rec.status, Code: rec.code,
			Endpoint: s.endpoint(r), Token: apitally.TokenID(bearer(r)), Agent: r.UserAgent()}
		s.tally.Add(apitally.Key{Endpoint: req.Endpoint, Token: req.Token, Agent: req.Agent, Status: req.Status})
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		fmt.Fprintf(s.opts.Log, "%s hcloud stand-in: %s\n", req.Time.UTC().Format(time.RFC3339Nano), req)
	}()

	s.mu.Lock()
	limit, remaining, reset, ok := s.budget.take(time.Now())
	authorized := !s.revoked && r.Header.Get("Authorization") == "Bearer "+s.token
	failure := s.faults.nextFailure(r)
	s.mu.Unlock()
	w.Header().Set("RateLimit-Limit", fmt.Sprint(limit))
	w.Header().Set("RateLimit-Remaining", fmt.Sprint(remaining))
	w.Header().Set("RateLimit-Reset", fmt.Sprint(reset.Unix()))
	switch {
	case !ok:
		writeError(w, newError(CodeRateLimitExceeded, "limit of %d requests per hour reached", limit))
	case !authorized:
		writeError(w, newError(CodeUnauthorized, "unable to authenticate"))
	case failure != nil:
		failure.write(w)
	case !strings.HasPrefix(r.URL.Path, "/v1/"):
		writeError(w, newError(CodeNotFound, "not found"))
	default:
		s.mux.ServeHTTP(w, r)
	}
}

// recorder remembers the status and error code of an answer.
type recorder struct {
	http.ResponseWriter
	status int
	code   string
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the connection's writer (to flush it).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func correlationID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serverIDs is the one sequence of server IDs of every stand-in in a process. Hetzner's
// server IDs are unique across projects, and the Nodes of a cluster carry them as provider
// IDs (hcloud://<id>): two stand-ins beside each other on one API server, each counting from
// the same start, gave two machines one provider ID, and one test's orphan collector deleted
// the Node of another test's machine.
// Its IDs start above those of a stand-in with its own FirstServerID (101000001, ...).
var serverIDs atomic.Int64

func init() { serverIDs.Store(102_000_000) }

// nextID allocates the next ID of a kind of object. Callers hold s.mu.
func (s *StandIn) nextID(kind string) int64 {
	if kind == "server" && s.opts.FirstServerID == 0 {
		return serverIDs.Add(1)
	}
	s.lastID[kind]++
	return s.lastID[kind]
}

// logf writes a line about something other than a request.
func (s *StandIn) logf(format string, args ...any) {
	fmt.Fprintf(s.opts.Log, "%s hcloud stand-in: %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}
