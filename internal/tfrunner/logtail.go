// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// A run's log tail is what a run record keeps of a failed run's log, so that why it failed
// outlives the runner (a Job is deleted after its TTL, a local run folder with the machine).
const (
	// MaxLogTail bounds a kept log tail, in bytes.
	MaxLogTail = 4 << 10
	// LogTailLines is how many lines of a run's log an executor reads for its tail.
	LogTailLines = 80
	// LogTailBytes bounds what an executor reads for a tail, in bytes.
	LogTailBytes = 256 << 10
	// maxRenderedLine bounds one rendered message (a diagnostic's detail included).
	maxRenderedLine = 1 << 10
)

// RenderLog renders run log lines — tofu's `-json` messages and the runner's own, in the
// same shape — as text a person reads: one line per message with its time and level, a
// diagnostic's detail below it, indented. A line that is not such a message is kept as it is;
// empty lines are dropped. The log was redacted when it was written; rendering adds nothing
// that was not in it.
func RenderLog(data []byte) string {
	var b strings.Builder
	for _, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		b.WriteString(renderLine(line))
		b.WriteByte('\n')
	}
	return b.String()
}

func renderLine(line []byte) string {
	var msg struct {
		Level      string      `json:"@level"`
		Message    string      `json:"@message"`
		Timestamp  string      `json:"@timestamp"`
		Diagnostic *Diagnostic `json:"diagnostic"`
	}
	if json.Unmarshal(line, &msg) != nil || msg.Message == "" {
		return message.Cut(string(line), maxRenderedLine)
	}
	var b strings.Builder
	if ts, err := time.Parse(time.RFC3339Nano, msg.Timestamp); err == nil {
		b.WriteString(ts.UTC().Format("15:04:05Z") + " ")
	}
	if msg.Level != "" {
		b.WriteString(msg.Level + " ")
	}
	b.WriteString(msg.Message)
	if d := msg.Diagnostic; d != nil && strings.TrimSpace(d.Detail) != "" {
		for _, l := range strings.Split(strings.TrimSpace(d.Detail), "\n") {
			if l = strings.TrimRight(l, " \t"); l != "" {
				b.WriteString("\n    " + l)
			}
		}
	}
	return message.Cut(b.String(), maxRenderedLine)
}

// Tail is the end of text that fits in max bytes, in whole lines, after a line that says
// earlier lines were left out; a last line longer than max is cut at its start instead.
func Tail(text string, max int) string {
	text = strings.TrimRight(text, "\n")
	if len(text) <= max {
		return text
	}
	const marker = "(earlier lines left out)\n"
	lines := strings.Split(text, "\n")
	size, first := len(marker)-1, len(lines) // each line counts its newline, the last one has none
	for first > 0 && size+len(lines[first-1])+1 <= max {
		size += len(lines[first-1]) + 1
		first--
	}
	if first == len(lines) {
		room := max - len(marker) - len("…")
		if room <= 0 {
			return ""
		}
		return marker + message.KeepEnd(lines[len(lines)-1], room)
	}
	return marker + strings.Join(lines[first:], "\n")
}
