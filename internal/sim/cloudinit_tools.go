// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MetadataHost is the link-local address of a cloud's metadata service.
const MetadataHost = "169.254.169.254"

// curl exit statuses.
const (
	curlCannotConnect = 7
	curlHTTPError     = 22
	curlTimeout       = 28
	curlBadArgs       = 2
)

// curl: one request, with -f, -s, -S, -L, -o, -H (a header or @file of headers), -X,
// -d/--data (a string or @file), --cacert, --retry, --retry-delay, --retry-connrefused,
// --max-time and --connect-timeout. The machine's network routes 169.254.169.254 to its
// metadata service (MachineConfig.MetadataURL) and the package repositories' and release
// hosts to the simulated internet (internet); other hosts are reached for real, which is how
// the machine reaches the cluster's API server.
func (c *command) curl() uint8 {
	var (
		fail, silent, showError, connRefused bool
		retries                              int
		retryDelay, maxTime                  time.Duration
		output, target, method, data, caFile string
		headers                              []string
	)
	seconds := func(v string) (time.Duration, bool) {
		f, err := strconv.ParseFloat(v, 64)
		return time.Duration(f * float64(time.Second)), err == nil && f >= 0
	}
	for i := 0; i < len(c.args); i++ {
		a := c.args[i]
		value := func() (string, bool) {
			if i+1 < len(c.args) {
				i++
				return c.args[i], true
			}
			return "", false
		}
		switch {
		case a == "--fail":
			fail = true
		case a == "--silent":
			silent = true
		case a == "--show-error":
			showError = true
		case a == "--location", a == "--insecure", a == "--retry-all-errors":
		case a == "--version":
			fmt.Fprintln(c.hc.Stdout, "curl 8.5.0 (x86_64-pc-linux-gnu) fulfiller-sim")
			return 0
		case a == "--retry-connrefused":
			connRefused = true
		case a == "--retry", a == "--retry-delay", a == "--max-time", a == "-m", a == "--connect-timeout", a == "--output", a == "-o",
			a == "-H", a == "--header", a == "-X", a == "--request", a == "-d", a == "--data", a == "--cacert":
			v, ok := value()
			if !ok {
				return c.errorf(curlBadArgs, "option %s: requires parameter", a)
			}
			var good bool
			switch a {
			case "--retry":
				n, err := strconv.Atoi(v)
				retries, good = n, err == nil && n >= 0
			case "--retry-delay":
				retryDelay, good = seconds(v)
			case "--max-time", "-m":
				maxTime, good = seconds(v)
			case "--connect-timeout":
				_, good = seconds(v)
			case "--output", "-o":
				output, good = v, true
			case "-X", "--request":
				method, good = v, true
			case "-d", "--data":
				data, good = v, true
			case "--cacert":
				caFile, good = v, true
			default:
				headers, good = append(headers, v), true
			}
			if !good {
				return c.errorf(curlBadArgs, "option %s: expected a proper numerical parameter", a)
			}
		case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(a) > 1:
			for _, f := range a[1:] {
				switch f {
				case 'f':
					fail = true
				case 's':
					silent = true
				case 'S':
					showError = true
				case 'L', 'k':
				default:
					return c.errorf(curlBadArgs, "option -%c is not simulated", f)
				}
			}
		case strings.HasPrefix(a, "-"):
			return c.errorf(curlBadArgs, "option %s is not simulated", a)
		default:
			if target != "" {
				return c.errorf(curlBadArgs, "the simulated curl fetches one URL")
			}
			target = a
		}
	}
	report := func(status uint8, format string, args ...any) uint8 {
		if !silent || showError {
			fmt.Fprintf(c.hc.Stderr, "curl: (%d) %s\n", status, fmt.Sprintf(format, args...))
		}
		return status
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return report(3, "URL rejected: %q", target)
	}
	req := request{url: u, method: method, maxTime: maxTime, fail: fail, connRefused: connRefused}
	if req.method == "" {
		req.method = http.MethodGet
		if data != "" {
			req.method = http.MethodPost
		}
	}
	if req.body, err = c.curlArg(data); err != nil {
		return report(26, "Failed to open/read local data from file/application")
	}
	for _, h := range headers {
		lines, err := c.curlArg(h)
		if err != nil {
			return report(26, "Failed to open/read local data from file/application")
		}
		for _, line := range strings.Split(string(lines), "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				req.headers = append(req.headers, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
			}
		}
	}
	if caFile != "" {
		if req.ca, err = os.ReadFile(c.path(caFile)); err != nil {
			return report(77, "error setting certificate file: %s", caFile)
		}
	}
	delay := retryDelay
	for attempt := 0; ; attempt++ {
		status, transient, body, msg := c.fetch(req)
		if status == 0 {
			if output != "" {
				if err := os.WriteFile(c.path(output), body, 0o644); err != nil {
					return report(23, "failure writing output to destination: %v", unwrapPath(err))
				}
			} else {
				_, _ = c.hc.Stdout.Write(body)
			}
			return 0
		}
		if !transient || attempt >= retries {
			return report(status, "%s", msg)
		}
		wait := delay
		if retryDelay == 0 {
			wait = time.Second << min(attempt, 9)
		}
		if !silent {
			fmt.Fprintf(c.hc.Stderr, "Warning: Problem: %s. Will retry in %s. %d retries left.\n", msg, wait, retries-attempt)
		}
		select {
		case <-c.ctx.Done():
			return report(curlTimeout, "interrupted")
		case <-time.After(wait):
		}
	}
}

// curlArg is a -d or -H argument: as it is, or @FILE's content from the disk.
func (c *command) curlArg(v string) ([]byte, error) {
	if name, ok := strings.CutPrefix(v, "@"); ok {
		return os.ReadFile(c.path(name))
	}
	return []byte(v), nil
}

// request is one request of curl's.
type request struct {
	url         *url.URL
	method      string
	headers     [][2]string
	body        []byte
	ca          []byte // PEM of the CA to trust; nil: the system's
	maxTime     time.Duration
	fail        bool
	connRefused bool
}

// fetch makes one request; transient says whether curl's --retry retries the failure.
func (c *command) fetch(r request) (status uint8, transient bool, body []byte, msg string) {
	host := r.url.Hostname()
	target := r.url.String()
	switch {
	case host == MetadataHost:
		if c.sh.m.cfg.MetadataURL == "" {
			return curlCannotConnect, r.connRefused, nil, fmt.Sprintf("Failed to connect to %s port %s: Connection refused", host, portOf(r.url))
		}
		target = strings.TrimSuffix(c.sh.m.cfg.MetadataURL, "/") + r.url.EscapedPath()
		if r.url.RawQuery != "" {
			target += "?" + r.url.RawQuery
		}
	case internetHosts[host]:
		return c.internet(r)
	}
	ctx := c.ctx
	if r.maxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.maxTime)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, bytes.NewReader(r.body))
	if err != nil {
		return curlBadArgs, false, nil, err.Error()
	}
	req.Header.Set("User-Agent", "curl/8.5.0")
	for _, h := range r.headers {
		req.Header.Add(h[0], h[1])
	}
	httpClient := http.DefaultClient
	if r.ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(r.ca) {
			return 77, false, nil, "error setting certificate verify locations"
		}
		httpClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		defer httpClient.CloseIdleConnections()
	}
	resp, err := httpClient.Do(req)
	var netErr net.Error
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return curlTimeout, true, nil, fmt.Sprintf("Operation timed out after %d milliseconds", r.maxTime.Milliseconds())
	case errors.As(err, &certErr):
		return 60, false, nil, "SSL certificate problem: unable to get local issuer certificate"
	case err != nil:
		return curlCannotConnect, r.connRefused, nil, fmt.Sprintf("Failed to connect to %s port %s: Connection refused", host, portOf(r.url))
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 56, true, nil, "Failure when receiving data from the peer"
	}
	if r.fail && resp.StatusCode >= 400 {
		return curlHTTPError, retriedStatus(resp.StatusCode), nil, fmt.Sprintf("The requested URL returned error: %d", resp.StatusCode)
	}
	return 0, false, body, ""
}

// retriedStatus says whether curl's --retry retries an HTTP status.
func retriedStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// sed: s commands (s<d>regex<d>replacement<d>[g]), from -e or the first argument, in
// basic (default) or extended (-E, -r) regular expressions, on files (-i: in place) or
// standard input.
func (c *command) sed() uint8 {
	var (
		inPlace, extended bool
		exprs, files      []string
	)
	for i := 0; i < len(c.args); i++ {
		a := c.args[i]
		switch {
		case a == "-i" || strings.HasPrefix(a, "-i") && !strings.HasPrefix(a, "--"):
			inPlace = true
		case a == "-E" || a == "-r":
			extended = true
		case a == "-e" && i+1 < len(c.args):
			exprs = append(exprs, c.args[i+1])
			i++
		case strings.HasPrefix(a, "-") && a != "-":
			return c.errorf(1, "option %s is not simulated", a)
		case len(exprs) == 0:
			exprs = append(exprs, a)
		default:
			files = append(files, a)
		}
	}
	if len(exprs) == 0 {
		return c.errorf(1, "no script")
	}
	var subs []substitution
	for _, e := range exprs {
		for _, part := range strings.Split(e, "\n") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			s, err := parseSubstitution(strings.TrimSpace(part), extended)
			if err != nil {
				return c.errorf(1, "-e expression: %v", err)
			}
			subs = append(subs, s)
		}
	}
	edit := func(text string) string {
		lines := strings.SplitAfter(text, "\n")
		for i, line := range lines {
			body, nl := strings.CutSuffix(line, "\n")
			for _, s := range subs {
				body = s.apply(body)
			}
			if nl {
				body += "\n"
			}
			lines[i] = body
		}
		return strings.Join(lines, "")
	}
	if len(files) == 0 {
		if inPlace {
			return c.errorf(1, "no input files")
		}
		in, _ := io.ReadAll(c.hc.Stdin)
		_, _ = io.WriteString(c.hc.Stdout, edit(string(in)))
		return 0
	}
	var status uint8
	for _, f := range files {
		p := c.path(f)
		data, err := os.ReadFile(p)
		if err != nil {
			status = c.errorf(2, "can't read %s: %v", f, unwrapPath(err))
			continue
		}
		out := edit(string(data))
		if !inPlace {
			_, _ = io.WriteString(c.hc.Stdout, out)
			continue
		}
		info, _ := os.Stat(p)
		if err := os.WriteFile(p, []byte(out), info.Mode().Perm()); err != nil {
			status = c.errorf(4, "couldn't write %s: %v", f, unwrapPath(err))
		}
	}
	return status
}

type substitution struct {
	addr   *regexp.Regexp // only lines it matches; nil: every line
	re     *regexp.Regexp
	repl   string // in regexp.Expand's template syntax
	global bool
}

func (s substitution) apply(line string) string {
	if s.addr != nil && !s.addr.MatchString(line) {
		return line
	}
	if s.global {
		return s.re.ReplaceAllString(line, s.repl)
	}
	m := s.re.FindStringSubmatchIndex(line)
	if m == nil {
		return line
	}
	return line[:m[0]] + string(s.re.ExpandString(nil, s.repl, line, m)) + line[m[1]:]
}

// parseSubstitution reads [/address/]s<d>regex<d>replacement<d>flags.
func parseSubstitution(expr string, extended bool) (substitution, error) {
	var addr *regexp.Regexp
	if strings.HasPrefix(expr, "/") {
		end := -1
		for i := 1; i < len(expr); i++ {
			if expr[i] == '\\' {
				i++
				continue
			}
			if expr[i] == '/' {
				end = i
				break
			}
		}
		if end < 0 {
			return substitution{}, fmt.Errorf("unterminated address regex")
		}
		pattern := expr[1:end]
		if !extended {
			pattern = basicToRE2(pattern)
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			return substitution{}, fmt.Errorf("address %q: %w", expr[1:end], err)
		}
		addr, expr = re, strings.TrimSpace(expr[end+1:])
	}
	s, err := parseCommand(expr, extended)
	s.addr = addr
	return s, err
}

// parseCommand reads s<d>regex<d>replacement<d>flags.
func parseCommand(expr string, extended bool) (substitution, error) {
	if len(expr) < 2 || expr[0] != 's' {
		return substitution{}, fmt.Errorf("unknown command %q (only s is simulated)", truncate(expr, 20))
	}
	delim := expr[1]
	var parts []string
	var cur strings.Builder
	for i := 2; i < len(expr); i++ {
		switch ch := expr[i]; {
		case ch == '\\' && i+1 < len(expr) && expr[i+1] == delim:
			cur.WriteByte(0) // a literal delimiter, marked
			i++
		case ch == '\\' && i+1 < len(expr):
			cur.WriteByte('\\')
			cur.WriteByte(expr[i+1])
			i++
		case ch == delim:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(ch)
		}
	}
	if len(parts) != 2 {
		return substitution{}, fmt.Errorf("unterminated `s' command")
	}
	flags := cur.String()
	s := substitution{}
	for _, f := range flags {
		switch f {
		case 'g':
			s.global = true
		default:
			return substitution{}, fmt.Errorf("flag %q of `s' is not simulated", f)
		}
	}
	pattern := parts[0]
	if !extended {
		pattern = basicToRE2(pattern)
	}
	pattern = strings.ReplaceAll(pattern, "\x00", regexp.QuoteMeta(string(delim)))
	re, err := regexp.Compile(pattern)
	if err != nil {
		return substitution{}, fmt.Errorf("regex %q: %w", parts[0], err)
	}
	s.re = re
	var repl strings.Builder
	r := parts[1]
	for i := 0; i < len(r); i++ {
		switch ch := r[i]; {
		case ch == 0:
			repl.WriteByte(delim)
		case ch == '&':
			repl.WriteString("${0}")
		case ch == '$':
			repl.WriteString("$$")
		case ch == '\\' && i+1 < len(r):
			i++
			switch n := r[i]; {
			case n >= '0' && n <= '9':
				repl.WriteString("${" + string(n) + "}")
			case n == 'n':
				repl.WriteByte('\n')
			case n == '$':
				repl.WriteString("$$")
			default:
				repl.WriteByte(n)
			}
		default:
			repl.WriteByte(ch)
		}
	}
	s.repl = repl.String()
	return s, nil
}

// basicToRE2 turns a POSIX basic regular expression into RE2 syntax: \( \) \{ \} \| \+ \?
// are operators, their bare forms literals.
func basicToRE2(bre string) string {
	var b strings.Builder
	for i := 0; i < len(bre); i++ {
		ch := bre[i]
		if ch == '\\' && i+1 < len(bre) {
			n := bre[i+1]
			i++
			if strings.IndexByte("(){}|+?", n) >= 0 {
				b.WriteByte(n)
			} else {
				b.WriteByte('\\')
				b.WriteByte(n)
			}
			continue
		}
		if strings.IndexByte("(){}|+?", ch) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(ch)
	}
	return b.String()
}
