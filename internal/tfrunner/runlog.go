// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxDiagnostics bounds how many diagnostics a run keeps for classification.
const maxDiagnostics = 200

// runLog receives tofu's `-json` stdout and its stderr, copies them line by line to the run
// log with secret values redacted, and keeps the diagnostics. tfexec writes stdout and stderr
// from two goroutines; mu serialises what reaches w. A failing w never stops tofu's output
// from being read (that would block tofu); the first write error is kept in err.
type runLog struct {
	mu       sync.Mutex
	w        io.Writer
	err      error
	secrets  []string
	replacer *strings.Replacer
	diags    []Diagnostic
	outputs  map[string]streamOutput // of the last outputs message with values
	out      lineWriter
	errOut   lineWriter
}

func newRunLog(w io.Writer, secrets []string) *runLog {
	l := &runLog{w: w}
	l.out.line = l.stdoutLine
	l.errOut.line = l.stderrLine
	l.addSecrets(minSecretLen, secrets)
	return l
}

// Write takes tofu's JSON stream.
func (l *runLog) Write(p []byte) (int, error) { return l.out.Write(p) }

// stderr returns the writer for tofu's stderr; each line becomes a JSON log message.
func (l *runLog) stderr() io.Writer { return &l.errOut }

// flush passes on a last line that has no newline.
func (l *runLog) flush() {
	l.out.flush()
	l.errOut.flush()
}

func (l *runLog) diagnostics() []Diagnostic {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Diagnostic(nil), l.diags...)
}

// finalOutputs returns the outputs of the last `outputs` message with values in tofu's
// stream (apply -json prints one after a successful apply), and whether there was one.
func (l *runLog) finalOutputs() (map[string]streamOutput, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.outputs, l.outputs != nil
}

func (l *runLog) stdoutLine(line []byte) {
	if outputs, ok := parseOutputs(line); ok { // before redaction: the values are kept as tofu gave them
		l.mu.Lock()
		l.outputs = outputs
		l.mu.Unlock()
	}
	text := l.redact(string(bytes.TrimRight(line, "\r\n")))
	if d, ok := ParseDiagnostic([]byte(text)); ok {
		l.mu.Lock()
		if len(l.diags) < maxDiagnostics {
			l.diags = append(l.diags, d)
		}
		l.mu.Unlock()
	}
	l.write(text)
}

func (l *runLog) stderrLine(line []byte) {
	text := strings.TrimSpace(string(line))
	if text == "" {
		return
	}
	l.message("error", "tofu.stderr", l.redact(text))
}

// note writes a line of the runner's own.
func (l *runLog) note(level, msg string) {
	l.message(level, "fulfiller", "fulfiller: "+msg)
}

// message writes a log line in the shape of tofu's own messages.
func (l *runLog) message(level, module, msg string) {
	msg = l.redact(msg)
	line, _ := json.Marshal(struct {
		Level     string `json:"@level"`
		Message   string `json:"@message"`
		Module    string `json:"@module"`
		Timestamp string `json:"@timestamp"`
		Type      string `json:"type"`
	}{level, msg, module, time.Now().UTC().Format(time.RFC3339Nano), "log"})
	l.write(string(line))
}

func (l *runLog) write(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	_, l.err = io.WriteString(l.w, line+"\n")
}

// Shortest values that are redacted: shorter ones would take common words out of the log.
const (
	minSecretLen = 8  // a variable's value (user data, sensitive variables)
	minEnvLen    = 6  // a value of the run's environment, or a password in it
	minPieceLen  = 4  // a piece of a password between URL delimiters
	minLineLen   = 16 // a line of a multi-line secret
)

// addSecrets makes the log replace each secret of at least min bytes, the forms it takes in
// JSON and in Go's quoted strings (error messages quote URLs), and each of its longer lines
// (provisioners print output line by line) with "(redacted)".
func (l *runLog) addSecrets(min int, secrets []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range l.secrets {
		seen[s] = true
	}
	add := func(s string, min int) {
		for _, form := range []string{s, jsonEscape(s), goQuoted(s), jsonEscape(goQuoted(s))} {
			if len(form) >= min && !seen[form] {
				seen[form] = true
				l.secrets = append(l.secrets, form)
			}
		}
	}
	for _, s := range secrets {
		add(s, min)
		for _, line := range strings.Split(s, "\n") {
			add(strings.TrimSpace(line), minLineLen)
		}
	}
	// Longest first, so a whole value is replaced before any of its lines.
	sort.SliceStable(l.secrets, func(i, j int) bool { return len(l.secrets[i]) > len(l.secrets[j]) })
	pairs := make([]string, 0, 2*len(l.secrets))
	for _, s := range l.secrets {
		pairs = append(pairs, s, "(redacted)")
	}
	l.replacer = strings.NewReplacer(pairs...)
}

func (l *runLog) redact(s string) string {
	l.mu.Lock()
	r := l.replacer
	l.mu.Unlock()
	if r == nil {
		return s
	}
	return r.Replace(s)
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// goQuoted is s as %q prints it, without the quotes.
func goQuoted(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// envSecrets are the values of a run's environment that came with its request or the
// runner's TofuEnvPrefix variables — provider credentials, the state backend's connection
// string, the encryption configuration — with the passwords and passphrases inside them,
// which a tool may print on its own.
func envSecrets(envs ...map[string]string) (values, passwords, pieces []string) {
	for _, env := range envs {
		for _, v := range env {
			values = append(values, v)
			for _, pw := range embeddedPasswords(v) {
				passwords = append(passwords, pw)
				// A password with an unencoded URL delimiter breaks its URL there: errors then
				// show the URL, or a host, cut at it.
				pieces = append(pieces, strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune("@#/?", r) })...)
			}
		}
	}
	return values, passwords, pieces
}

// embeddedPasswords finds passwords inside a value: a URL's (scheme://user:password@host,
// read leniently: with the last '@' and with the first one), a key=value connection string's
// password=..., and the passphrase, password, secret or token strings of a JSON document
// (with HCL's template escapes undone, as the encryption configuration has them).
func embeddedPasswords(v string) []string {
	var out []string
	if _, rest, ok := strings.Cut(v, "://"); ok {
		for _, at := range []int{strings.LastIndex(rest, "@"), strings.Index(rest, "@")} {
			if at < 0 {
				continue
			}
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
				out = append(out, pw)
				if unescaped, err := url.PathUnescape(pw); err == nil && unescaped != pw {
					out = append(out, unescaped)
				}
			}
		}
	}
	for _, field := range strings.Fields(v) {
		if key, value, ok := strings.Cut(field, "="); ok && strings.EqualFold(key, "password") {
			out = append(out, strings.Trim(value, "'"))
		}
	}
	var doc any
	if json.Unmarshal([]byte(v), &doc) == nil {
		var walk func(key string, x any)
		walk = func(key string, x any) {
			switch x := x.(type) {
			case map[string]any:
				for k, child := range x {
					walk(k, child)
				}
			case []any:
				for _, child := range x {
					walk(key, child)
				}
			case string:
				k := strings.ToLower(key)
				if strings.Contains(k, "pass") || strings.Contains(k, "secret") || strings.Contains(k, "token") {
					out = append(out, x, strings.NewReplacer("$${", "${", "%%{", "%{").Replace(x))
				}
			}
		}
		walk("", doc)
	}
	return out
}

// ParseDiagnostic returns the diagnostic of a `-json` message line of type "diagnostic".
func ParseDiagnostic(line []byte) (Diagnostic, bool) {
	var msg struct {
		Type       string      `json:"type"`
		Diagnostic *Diagnostic `json:"diagnostic"`
	}
	if err := json.Unmarshal(line, &msg); err != nil || msg.Type != "diagnostic" || msg.Diagnostic == nil {
		return Diagnostic{}, false
	}
	return *msg.Diagnostic, true
}

// streamOutput is one output of an `outputs` message: after a plan, with the planned action
// and no value; after an apply, with the value (left out when sensitive).
type streamOutput struct {
	Sensitive bool            `json:"sensitive"`
	Type      json.RawMessage `json:"type"`
	Value     json.RawMessage `json:"value"`
	Action    string          `json:"action"`
}

// parseOutputs returns the outputs of a `-json` message line of type "outputs" that reports
// values (the one after an apply), not planned actions.
func parseOutputs(line []byte) (map[string]streamOutput, bool) {
	if !bytes.Contains(line, []byte(`"outputs"`)) {
		return nil, false
	}
	var msg struct {
		Type    string                  `json:"type"`
		Outputs map[string]streamOutput `json:"outputs"`
	}
	if err := json.Unmarshal(line, &msg); err != nil || msg.Type != "outputs" || msg.Outputs == nil {
		return nil, false
	}
	for _, o := range msg.Outputs {
		if o.Action != "" {
			return nil, false
		}
	}
	return msg.Outputs, true
}

// lineWriter calls line for each complete line written to it (newline included).
type lineWriter struct {
	buf  []byte
	line func([]byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	rest := w.buf
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		w.line(rest[:i+1])
		rest = rest[i+1:]
	}
	w.buf = append(w.buf[:0], rest...)
	return len(p), nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.line(w.buf)
		w.buf = w.buf[:0]
	}
}
