package tfrunner

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
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
	out      lineWriter
	errOut   lineWriter
}

func newRunLog(w io.Writer, secrets []string) *runLog {
	l := &runLog{w: w}
	l.out.line = l.stdoutLine
	l.errOut.line = l.stderrLine
	l.addSecrets(secrets)
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

func (l *runLog) stdoutLine(line []byte) {
	text := l.redact(string(bytes.TrimRight(line, "\r\n")))
	if d, ok := parseDiagnostic([]byte(text)); ok {
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

// addSecrets makes the log replace each secret, its JSON-escaped form, and each of its longer
// lines (provisioners print output line by line) with "(redacted)".
func (l *runLog) addSecrets(secrets []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range l.secrets {
		seen[s] = true
	}
	add := func(s string, min int) {
		if len(s) >= min && !seen[s] {
			seen[s] = true
			l.secrets = append(l.secrets, s)
		}
	}
	for _, s := range secrets {
		add(s, 8)
		add(jsonEscape(s), 8)
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			add(line, 16)
			add(jsonEscape(line), 16)
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

// parseDiagnostic returns the diagnostic of a `-json` message line of type "diagnostic".
func parseDiagnostic(line []byte) (Diagnostic, bool) {
	var msg struct {
		Type       string      `json:"type"`
		Diagnostic *Diagnostic `json:"diagnostic"`
	}
	if err := json.Unmarshal(line, &msg); err != nil || msg.Type != "diagnostic" || msg.Diagnostic == nil {
		return Diagnostic{}, false
	}
	return *msg.Diagnostic, true
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
