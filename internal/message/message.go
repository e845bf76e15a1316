// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package message shapes the messages the fulfiller writes for people: condition, event and
// run messages. It imports only the standard library, so that the runner binary, which links
// no Kubernetes client, shapes its run messages as the API types do.
package message

import (
	"strings"
	"time"
	"unicode/utf8"
)

// MaxLength bounds every message the fulfiller writes for people: condition messages, event
// messages and run messages. `kubectl get -o wide` shows them on one line.
const MaxLength = 300

// Short is s as a message: white space runs (newlines included) folded to single spaces, and
// cut to at most MaxLength bytes on a rune boundary, a cut marked with an ellipsis.
func Short(s string) string { return ShortenTo(s, MaxLength) }

// ShortenTo is Short with another bound, for a part of a message.
func ShortenTo(s string, limit int) string {
	return Cut(strings.Join(strings.Fields(s), " "), limit)
}

// ellipsis marks where text was cut.
const ellipsis = "…"

// Cut is s cut to at most limit bytes on a rune boundary, a cut marked with an ellipsis.
// Unlike Short it keeps s's white space (the line breaks of a rendered log).
func Cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := max(limit-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// KeepEnd is the end of s, at most n bytes from a rune boundary, after an ellipsis when
// anything before it was left out: for text whose end says the most (what a failed command
// printed last).
func KeepEnd(s string, n int) string {
	if len(s) <= n {
		return s
	}
	start := len(s) - n
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return ellipsis + s[start:]
}

// Duration prints a duration as people read it in a message: rounded to the second, 10m
// rather than 10m0s, 1h rather than 1h0m0s.
func Duration(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
