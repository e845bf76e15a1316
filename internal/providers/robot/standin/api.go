// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package standin is a Hetzner Robot stand-in: the webservice (servers, rescue boot, reset,
// SSH keys, per-endpoint request budgets, basic auth) and simulated dedicated servers behind
// it, each with an SSH endpoint on a loopback port that serves the rescue system or the
// installed one. Test and local-environment machinery; the controller binary never links it.
//
// What it does as Robot does (robot.hetzner.com/doc/webservice/en.html): the JSON shapes of
// GET /server, /server/{n}, /reset/{n}, /boot/{n}/rescue (and /last), /key; form-encoded
// POSTs; the error envelope {"error":{"status","code","message"}} with the documented codes
// and statuses (401 on bad credentials, 404 SERVER_NOT_FOUND, BOOT_NOT_AVAILABLE,
// RESET_NOT_AVAILABLE, 400 INVALID_INPUT with missing/invalid, 409 KEY_ALREADY_EXISTS, 403
// RATE_LIMIT_EXCEEDED with max_request and interval); a sliding-window budget per endpoint;
// a rescue activation that lasts for one boot.
//
// What it fakes: the servers' hardware and OS. A reset reboots after Timings.Boot into the
// rescue system (a new host key each boot, the armed keys authorized) or the installed
// system; the rescue system knows the commands of package robot (writing files,
// installimage, reboot), and installimage "installs" the post-install script's payloads
// after Timings.Install, or fails as told; the installed system runs a simulated machine
// (internal/sim) from its NoCloud seed, which joins with the token in it. Not simulated: the
// 10-minute block after 3 failed logins, Robot's own Linux installation (/boot/{n}/linux),
// vKVM, failover IPs, traffic.
package standin

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/utils/clock"

	"github.com/fulfiller-sh/fulfiller/internal/apitally"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
)

// APIConfig configures the webservice stand-in.
type APIConfig struct {
	User, Password string
	// Budgets are the endpoints' request budgets (default robot.DocumentedBudgets()).
	Budgets map[string]robot.Budget
	Clock   clock.Clock
}

// API is the webservice stand-in.
type API struct {
	cfg APIConfig
	srv *http.Server
	URL string

	mu       sync.Mutex
	servers  map[int]*Server
	keys     map[string]robot.Key
	sent     map[string][]time.Time
	calls    []string
	byServer map[int][]string
	tally    apitally.Tally
}

// StartAPI serves the webservice on a loopback port until Close.
func StartAPI(cfg APIConfig) (*API, error) {
	if cfg.Budgets == nil {
		cfg.Budgets = robot.DocumentedBudgets()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("robot stand-in: %w", err)
	}
	a := &API{cfg: cfg, URL: "http://" + ln.Addr().String(), servers: map[int]*Server{}, keys: map[string]robot.Key{}, sent: map[string][]time.Time{}, byServer: map[int][]string{}}
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.srv.Serve(ln) }() // http.ErrServerClosed once Close is called
	return a, nil
}

// Close stops the webservice (not the servers).
func (a *API) Close() error { return a.srv.Close() }

// AddServer puts a server into the account.
func (a *API) AddServer(s *Server) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.servers[s.cfg.Number] = s
	s.keyLookup = a.key
}

// Calls returns the endpoints called so far ("POST /reset/{server-number}"), in order.
func (a *API) Calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

// ServerCalls returns the endpoints called so far about server n (its number in the path:
// "POST /reset/{server-number}"), in order, whether the server is in the account or not.
func (a *API) ServerCalls(n int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.byServer[n]...)
}

// Counts returns how many requests the webservice answered so far per endpoint (its method
// and route, "POST /reset/{server-number}", as robot names them; "<method> ?" for a path that
// is none), webservice user (apitally.TokenID of the user and password, never either),
// User-Agent and status, refused ones included.
func (a *API) Counts() []apitally.Count { return a.tally.Counts() }

// statusRecorder remembers an answer's status.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (a *API) key(fp string) (robot.Key, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.keys[fp]
	return k, ok
}

type route struct {
	method  string
	pattern *regexp.Regexp
	name    string
	handle  func(a *API, w http.ResponseWriter, r *http.Request, arg string)
}

var routes = []route{
	{"GET", regexp.MustCompile(`^/server$`), robot.EndpointServers, (*API).listServers},
	{"GET", regexp.MustCompile(`^/server/(\d+)$`), robot.EndpointServer, (*API).getServer},
	{"GET", regexp.MustCompile(`^/reset/(\d+)$`), robot.EndpointResetOptions, (*API).getReset},
	{"POST", regexp.MustCompile(`^/reset/(\d+)$`), robot.EndpointReset, (*API).postReset},
	{"GET", regexp.MustCompile(`^/boot/(\d+)/rescue$`), robot.EndpointRescue, (*API).getRescue},
	{"POST", regexp.MustCompile(`^/boot/(\d+)/rescue$`), robot.EndpointRescueOn, (*API).postRescue},
	{"DELETE", regexp.MustCompile(`^/boot/(\d+)/rescue$`), robot.EndpointRescueOff, (*API).deleteRescue},
	{"GET", regexp.MustCompile(`^/boot/(\d+)/rescue/last$`), robot.EndpointRescueLast, (*API).lastRescue},
	{"GET", regexp.MustCompile(`^/key$`), robot.EndpointKeys, (*API).listKeys},
	{"POST", regexp.MustCompile(`^/key$`), robot.EndpointKeyCreate, (*API).postKey},
	{"GET", regexp.MustCompile(`^/key/([0-9a-f:]+)$`), robot.EndpointKey, (*API).getKey},
	{"DELETE", regexp.MustCompile(`^/key/([0-9a-f:]+)$`), robot.EndpointKeyDelete, (*API).deleteKey},
}

func (a *API) serve(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := r.BasicAuth()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	w = rec
	endpoint := r.Method + " ?"
	for _, rt := range routes {
		if rt.method == r.Method && rt.pattern.MatchString(r.URL.Path) {
			endpoint = rt.name
			break
		}
	}
	var credentials string
	if ok {
		credentials = user + ":" + pass
	}
	defer func() {
		a.tally.Add(apitally.Key{Endpoint: endpoint, Token: apitally.TokenID(credentials), Agent: r.UserAgent(), Status: rec.status})
	}()
	if !ok || subtle.ConstantTimeCompare([]byte(user), []byte(a.cfg.User)) != 1 || subtle.ConstantTimeCompare([]byte(pass), []byte(a.cfg.Password)) != 1 {
		writeError(w, http.StatusUnauthorized, robot.CodeUnauthorized, "Unable to authenticate", nil)
		return
	}
	for _, rt := range routes {
		m := rt.pattern.FindStringSubmatch(r.URL.Path)
		if m == nil || rt.method != r.Method {
			continue
		}
		if strings.Contains(rt.name, "{server-number}") {
			n, _ := strconv.Atoi(m[1])
			a.mu.Lock()
			a.byServer[n] = append(a.byServer[n], rt.name)
			a.mu.Unlock()
		}
		if budget, ok := a.take(rt.name); !ok {
			writeError(w, http.StatusForbidden, robot.CodeRateLimitExceeded, "rate limit exceeded", map[string]any{
				"max_request": budget.Requests, "interval": int(budget.Interval / time.Second),
			})
			return
		}
		arg := ""
		if len(m) > 1 {
			arg = m[1]
		}
		if err := r.ParseForm(); err != nil {
			writeError(w, http.StatusBadRequest, robot.CodeInvalidInput, "invalid input", nil)
			return
		}
		rt.handle(a, w, r, arg)
		return
	}
	writeError(w, http.StatusNotFound, robot.CodeNotFound, "Not found", nil)
}

// take counts a request against its endpoint's budget (sliding window, shared between the
// two server reads as the client assumes) and reports whether it is allowed.
func (a *API) take(endpoint string) (robot.Budget, bool) {
	key := endpoint
	if endpoint == robot.EndpointServer {
		key = robot.EndpointServers
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, endpoint)
	budget, ok := a.cfg.Budgets[key]
	if !ok {
		return budget, true
	}
	now := a.cfg.Clock.Now()
	sent := a.sent[key]
	for len(sent) > 0 && !sent[0].Add(budget.Interval).After(now) {
		sent = sent[1:]
	}
	if len(sent) >= budget.Requests {
		a.sent[key] = sent
		return budget, false
	}
	a.sent[key] = append(sent, now)
	return budget, true
}

func writeError(w http.ResponseWriter, status int, code, message string, extra map[string]any) {
	body := map[string]any{"status": status, "code": code, "message": message}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, map[string]any{"error": body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *API) server(w http.ResponseWriter, arg string) *Server {
	n, _ := strconv.Atoi(arg)
	a.mu.Lock()
	s := a.servers[n]
	a.mu.Unlock()
	if s == nil {
		writeError(w, http.StatusNotFound, robot.CodeServerNotFound, fmt.Sprintf("Server with id %s not found", arg), nil)
	}
	return s
}

func (a *API) listServers(w http.ResponseWriter, _ *http.Request, _ string) {
	a.mu.Lock()
	numbers := make([]int, 0, len(a.servers))
	for n := range a.servers {
		numbers = append(numbers, n)
	}
	a.mu.Unlock()
	if len(numbers) == 0 {
		writeError(w, http.StatusNotFound, robot.CodeServerNotFound, "No server found", nil)
		return
	}
	sort.Ints(numbers)
	out := make([]map[string]any, 0, len(numbers))
	for _, n := range numbers {
		a.mu.Lock()
		s := a.servers[n]
		a.mu.Unlock()
		out = append(out, map[string]any{"server": s.info(false)})
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) getServer(w http.ResponseWriter, _ *http.Request, arg string) {
	if s := a.server(w, arg); s != nil {
		writeJSON(w, http.StatusOK, map[string]any{"server": s.info(true)})
	}
}

func (a *API) getReset(w http.ResponseWriter, _ *http.Request, arg string) {
	s := a.server(w, arg)
	if s == nil {
		return
	}
	if s.cfg.NoReset {
		writeError(w, http.StatusNotFound, robot.CodeResetNotAvailable, "The server has no reset option", nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"reset": map[string]any{
		"server_ip": s.IP(), "server_number": s.cfg.Number, "type": resetTypes, "operating_status": s.operatingStatus(),
	}})
}

var resetTypes = []string{"sw", "hw", "man"}

func (a *API) postReset(w http.ResponseWriter, r *http.Request, arg string) {
	s := a.server(w, arg)
	if s == nil {
		return
	}
	t := r.PostForm.Get("type")
	switch {
	case t == "":
		writeError(w, http.StatusBadRequest, robot.CodeInvalidInput, "invalid input", map[string]any{"missing": []string{"type"}, "invalid": nil})
		return
	case !contains(resetTypes, t):
		writeError(w, http.StatusBadRequest, robot.CodeInvalidInput, "invalid input", map[string]any{"missing": nil, "invalid": []string{"type"}})
		return
	case s.cfg.NoReset:
		writeError(w, http.StatusNotFound, robot.CodeResetNotAvailable, "The server has no reset option", nil)
		return
	case t == "man":
		writeError(w, http.StatusConflict, robot.CodeResetManualActive, "There is already a running manual reset", nil)
		return
	}
	s.Reset()
	writeJSON(w, http.StatusOK, map[string]any{"reset": map[string]any{"server_ip": s.IP(), "server_number": s.cfg.Number, "type": t}})
}

func (a *API) getRescue(w http.ResponseWriter, _ *http.Request, arg string) {
	if s := a.rescueServer(w, arg); s != nil {
		writeJSON(w, http.StatusOK, map[string]any{"rescue": s.rescueInfo(false)})
	}
}

func (a *API) lastRescue(w http.ResponseWriter, _ *http.Request, arg string) {
	if s := a.rescueServer(w, arg); s != nil {
		writeJSON(w, http.StatusOK, map[string]any{"rescue": s.rescueInfo(true)})
	}
}

func (a *API) rescueServer(w http.ResponseWriter, arg string) *Server {
	s := a.server(w, arg)
	if s != nil && s.cfg.NoRescue {
		writeError(w, http.StatusNotFound, robot.CodeBootNotAvailable, "No boot configuration available for this server", nil)
		return nil
	}
	return s
}

func (a *API) postRescue(w http.ResponseWriter, r *http.Request, arg string) {
	s := a.rescueServer(w, arg)
	if s == nil {
		return
	}
	os := r.PostForm.Get("os")
	if os == "" || !contains([]string{"linux", "vkvm"}, os) {
		field := map[string]any{"missing": []string{"os"}, "invalid": nil}
		if os != "" {
			field = map[string]any{"missing": nil, "invalid": []string{"os"}}
		}
		writeError(w, http.StatusBadRequest, robot.CodeInvalidInput, "invalid input", field)
		return
	}
	fps := append(r.PostForm["authorized_key[]"], r.PostForm["authorized_key"]...)
	var keys []robot.Key
	for _, fp := range fps {
		k, ok := a.key(fp)
		if !ok {
			writeError(w, http.StatusBadRequest, robot.CodeInvalidInput, "invalid input", map[string]any{"missing": nil, "invalid": []string{"authorized_key"}})
			return
		}
		keys = append(keys, k)
	}
	s.armRescue(os, keys)
	writeJSON(w, http.StatusOK, map[string]any{"rescue": s.rescueInfo(false)})
}

func (a *API) deleteRescue(w http.ResponseWriter, _ *http.Request, arg string) {
	s := a.rescueServer(w, arg)
	if s == nil {
		return
	}
	s.disarmRescue()
	writeJSON(w, http.StatusOK, map[string]any{"rescue": s.rescueInfo(false)})
}

func (a *API) listKeys(w http.ResponseWriter, _ *http.Request, _ string) {
	a.mu.Lock()
	fps := make([]string, 0, len(a.keys))
	for fp := range a.keys {
		fps = append(fps, fp)
	}
	sort.Strings(fps)
	out := make([]map[string]any, 0, len(fps))
	for _, fp := range fps {
		out = append(out, map[string]any{"key": a.keys[fp]})
	}
	a.mu.Unlock()
	if len(out) == 0 {
		writeError(w, http.StatusNotFound, robot.CodeNotFound, "No keys found", nil)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) postKey(w http.ResponseWriter, r *http.Request, _ string) {
	name, data := r.PostForm.Get("name"), r.PostForm.Get("data")
	var missing []string
	if name == "" {
		missing = append(missing, "name")
	}
	if data == "" {
		missing = append(missing, "data")
	}
	if len(missing) > 0 {
		writeError(w, http.StatusBadRequest, robot.CodeInvalidInput, "invalid input", map[string]any{"missing": missing, "invalid": nil})
		return
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(data))
	if err != nil {
		writeError(w, http.StatusBadRequest, robot.CodeInvalidInput, "invalid input", map[string]any{"missing": nil, "invalid": []string{"data"}})
		return
	}
	k := robot.Key{Name: name, Fingerprint: robot.MD5Fingerprint(pub), Type: keyType(pub), Size: 256, Data: strings.TrimSpace(data)}
	a.mu.Lock()
	_, exists := a.keys[k.Fingerprint]
	if !exists {
		a.keys[k.Fingerprint] = k
	}
	a.mu.Unlock()
	if exists {
		writeError(w, http.StatusConflict, robot.CodeKeyAlreadyExists, "The supplied key already exists", nil)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"key": k})
}

func (a *API) getKey(w http.ResponseWriter, _ *http.Request, fp string) {
	k, ok := a.key(fp)
	if !ok {
		writeError(w, http.StatusNotFound, robot.CodeNotFound, "Key not found", nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": k})
}

func (a *API) deleteKey(w http.ResponseWriter, _ *http.Request, fp string) {
	a.mu.Lock()
	_, ok := a.keys[fp]
	delete(a.keys, fp)
	a.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, robot.CodeNotFound, "Key not found", nil)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func keyType(pub ssh.PublicKey) string {
	switch pub.Type() {
	case ssh.KeyAlgoED25519:
		return "ED25519"
	case ssh.KeyAlgoRSA:
		return "RSA"
	}
	return "ECDSA"
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
