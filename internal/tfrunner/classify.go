// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// ErrorClass is the kind of a failed run. Its value is the CamelCase reason shown to users in
// conditions and events.
type ErrorClass string

const (
	// Capacity: the provider has no capacity for the type in the zone (sold out, placement).
	Capacity ErrorClass = "InsufficientCapacity"
	// Quota: an account limit was reached.
	Quota ErrorClass = "QuotaExceeded"
	// LockHeld: another run holds the state lock.
	LockHeld ErrorClass = "StateLocked"
	// Credentials: the provider or backend rejected the credentials.
	Credentials ErrorClass = "InvalidCredentials"
	// InvalidModule: the module or its inputs are wrong; retrying cannot help.
	InvalidModule ErrorClass = "InvalidModule"
	// Transient: a provider or API error that is expected to pass (rate limits, timeouts).
	Transient ErrorClass = "TransientError"
	// Timeout: the run's deadline passed.
	Timeout ErrorClass = "Timeout"
	// Cancelled: the run was interrupted on purpose.
	Cancelled ErrorClass = "Cancelled"
	// Unknown: anything else.
	Unknown ErrorClass = "Unknown"
)

// Retryable reports whether running the same request again later can succeed.
func (c ErrorClass) Retryable() bool {
	return c == Transient || c == LockHeld || c == Timeout
}

// Terminal reports whether the failure needs a change to the node class, module or secrets.
func (c ErrorClass) Terminal() bool {
	return c == InvalidModule || c == Credentials
}

// InsufficientCapacity reports whether the offering cannot be had right now, so the claim
// should be planned onto another one.
func (c ErrorClass) InsufficientCapacity() bool {
	return c == Capacity || c == Quota
}

// ErrInvalidModule marks a module that breaks the module contract or cannot be read.
var ErrInvalidModule = errors.New("invalid module")

// Diagnostic is the `diagnostic` object of a tofu `-json` message.
type Diagnostic struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail,omitempty"`
	Address  string `json:"address,omitempty"`
}

// lockSummary is the summary of the diagnostic tofu emits when it cannot take the state lock
// (internal/command/clistate/state.go), for every backend.
const lockSummary = "Error acquiring the state lock"

// lockInfoHeader starts the rendering of the holder's LockInfo in a statemgr.LockError. A
// backend that must lock to create a missing state (kubernetes, pg) reports a held lock while
// loading the state, under another summary ("Error loading state" during init), with it.
const lockInfoHeader = "Lock Info:\n  ID:"

// invalidModuleSummaries are summaries of diagnostics about the configuration or its inputs,
// emitted while loading, validating or planning it.
var invalidModuleSummaries = []string{
	"Unsupported argument",
	"Missing required argument",
	"Unsupported block type",
	"Missing required block",
	"Unsupported attribute",
	"Reference to undeclared input variable",
	"Reference to undeclared resource",
	"Reference to undeclared local value",
	"Reference to undeclared module",
	"Invalid reference",
	"Invalid value for input variable",
	"Invalid value for variable",
	"Invalid default value for variable",
	"No value for required variable",
	"Variables not allowed",
	"Module not installed",
	"Failed to read module directory",
	"Unreadable module directory",
	"Call to unknown function",
	"Invalid count argument",
	"Invalid for_each argument",
	"Output refers to sensitive values",
	"Unsupported OpenTofu Core version",
	"Invalid provider configuration",
	// A module's precondition on its inputs (modules/hetzner-cloud: the cluster's name).
	"Resource precondition failed",
	// HCL syntax errors.
	"Argument or block definition required",
	"Invalid block definition",
	"Invalid argument name",
	"Unclosed configuration block",
	"Missing newline after argument",
	"Missing key/value separator",
	"Invalid expression",
	"Invalid character",
	"Invalid multi-line string",
	"Unterminated template string",
	"Invalid JSON",
}

// invalidModulePrefixes are summary prefixes of families of configuration errors.
var invalidModulePrefixes = []string{
	"Duplicate ",        // Duplicate variable declaration, Duplicate backend configuration, ...
	"Extraneous label ", // Extraneous label for variable, ...
	"Missing name for ", // Missing name for variable, ...
	"Invalid variable ", // Invalid variable name, Invalid variable type, ...
}

// Rules are a node-type family's error rules: they recognise the codes and phrases of its
// cloud API and provider in one error diagnostic. The runner links the rules of every
// family it knows (RuleSet) and uses those of the request's family (Request.Family).
type Rules interface {
	// Classify returns the class of d, and false when the rules do not recognise it.
	Classify(d Diagnostic) (ErrorClass, bool)
}

// RetryTimer (optional, of a family's Rules) says when a failed run of the family can be
// retried at the earliest: when its cloud API's rate limit resets, learnt with one cheap
// request made with the run's environment (the class's credentials). The runner asks it
// about runs that failed with a retryable class; false: no earlier bound than the
// controller's backoff.
type RetryTimer interface {
	RetryAfter(ctx context.Context, errs []Diagnostic, env map[string]string) (time.Time, bool)
}

// retryTimerTimeout bounds the request a RetryTimer makes.
const retryTimerTimeout = 10 * time.Second

// retryAfter asks the family's rules, when they are a RetryTimer, when a run that failed
// with a retryable failure can be retried; the run's context may have ended.
func retryAfter(ctx context.Context, rules Rules, failure *RunError, diags []Diagnostic, env map[string]string) *time.Time {
	timer, ok := rules.(RetryTimer)
	if !ok || failure == nil || !failure.Class.Retryable() {
		return nil
	}
	var errs []Diagnostic
	for _, d := range diags {
		if d.Severity == "error" {
			errs = append(errs, d)
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryTimerTimeout)
	defer cancel()
	at, ok := timer.RetryAfter(ctx, errs, env)
	if !ok {
		return nil
	}
	at = at.UTC()
	return &at
}

// Explainer (optional, of Rules) says in one line what broke in a diagnostic its rules
// classified, when the words that say it come late in a long text (the API server's answer
// after the provider's context) and ShortMessage would cut them; "" keeps the whole text.
type Explainer interface {
	Explain(d Diagnostic) string
}

// RuleSet holds the error rules of each family by name.
type RuleSet map[string]Rules

// For returns the rules of a family, nil when it has none (or family is empty: a generic
// module).
func (rs RuleSet) For(family string) Rules {
	if family == "" {
		return nil
	}
	return rs[family]
}

// genericRules recognise what any run may hit whatever its module builds: the state
// backend or the state encryption refusing the credentials, and network and HTTP errors that
// pass. Each token matches as a whole word or phrase, case-insensitive; the classes are tried
// in this order. A cloud's own error codes (quota, capacity, rejected input) are its family's
// Rules, never these.
var genericRules = []struct {
	class  ErrorClass
	tokens []string
}{
	{Credentials, []string{"unauthorized", "401", "403", "forbidden", "invalid credentials", "authentication failed", "access denied",
		// State encryption (internal/encryption/base.go): a wrong key, or a plaintext state
		// where encryption is enforced without a fallback.
		"decryption failed", "unencrypted payload without unencrypted method configured"}},
	{Transient, []string{"too many requests", "429", "timeout", "timed out", "connection refused", "connection reset",
		"no such host", "service unavailable", "502", "503", "504", "temporarily unavailable"}},
}

// Classify turns the error diagnostics of a run and the error tfexec returned into a
// RunError, or nil when the run succeeded. Rules, first match wins: the run's context
// (cancelled, deadline), errors of this package (invalid module or request, a module that
// cannot be fetched), the state-lock
// diagnostic, configuration diagnostics, the family's rules (nil: none), then the generic
// rules.
func Classify(diags []Diagnostic, runErr error, rules Rules) *RunError {
	var errs []Diagnostic
	for _, d := range diags {
		if d.Severity == "error" {
			errs = append(errs, d)
		}
	}
	if runErr == nil && len(errs) == 0 {
		return nil
	}
	switch {
	case errors.Is(runErr, context.Canceled):
		return &RunError{Class: Cancelled, Message: "run cancelled"}
	case errors.Is(runErr, context.DeadlineExceeded):
		return &RunError{Class: Timeout, Message: "run deadline exceeded"}
	case errors.Is(runErr, ErrInvalidModule), errors.Is(runErr, ErrInvalidRequest):
		return NewRunError(InvalidModule, runErr.Error())
	case errors.Is(runErr, ErrModuleFetch):
		// The class resolved the source before any claim used it: a fetch that fails now
		// (an unreachable git server) is retried.
		return NewRunError(Transient, runErr.Error())
	}
	for _, d := range errs {
		if d.Summary == lockSummary || strings.Contains(d.Detail, lockInfoHeader) {
			return NewRunError(LockHeld, d.text())
		}
	}
	for _, d := range errs {
		if isInvalidModuleSummary(d.Summary) {
			return NewRunError(InvalidModule, d.text())
		}
	}
	if rules != nil {
		for _, d := range errs {
			if class, ok := rules.Classify(d); ok {
				msg := d.text()
				if ex, ok := rules.(Explainer); ok {
					msg = cmp.Or(ex.Explain(d), msg)
				}
				return NewRunError(class, msg)
			}
		}
	}
	for _, rule := range genericRules {
		for _, d := range errs {
			if ContainsAnyWord(d.CodeText(), rule.tokens) {
				return NewRunError(rule.class, d.text())
			}
		}
	}
	if len(errs) > 0 {
		return NewRunError(Unknown, errs[0].text())
	}
	return NewRunError(Unknown, runErr.Error())
}

// ContainsAnyWord reports whether text holds one of tokens as a whole word or phrase,
// case-insensitive: no letter, digit or underscore directly before or after it, so
// rate_limit_exceeded does not hold limit_exceeded. Tokens are lower case.
func ContainsAnyWord(text string, tokens []string) bool {
	text = strings.ToLower(text)
	for _, token := range tokens {
		if containsWord(text, token) {
			return true
		}
	}
	return false
}

// ContainsAllWords reports whether text holds every one of words (lower case), each as
// ContainsAnyWord finds it.
func ContainsAllWords(text string, words []string) bool {
	text = strings.ToLower(text)
	for _, w := range words {
		if !containsWord(text, w) {
			return false
		}
	}
	return true
}

func isInvalidModuleSummary(summary string) bool {
	for _, s := range invalidModuleSummaries {
		if strings.EqualFold(summary, s) {
			return true
		}
	}
	for _, p := range invalidModulePrefixes {
		if strings.HasPrefix(summary, p) {
			return true
		}
	}
	return false
}

// containsWord reports whether token occurs in text with no letter, digit or underscore
// directly before or after it. Both are lower case.
func containsWord(text, token string) bool {
	for from := 0; ; {
		i := strings.Index(text[from:], token)
		if i < 0 {
			return false
		}
		start, end := from+i, from+i+len(token)
		if (start == 0 || !isWordByte(text[start-1])) && (end == len(text) || !isWordByte(text[end])) {
			return true
		}
		from = start + 1
	}
}

func isWordByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_'
}

// localExecSummary and localExecOutput frame the error of a failed local-exec provisioner:
// "Error running command '<command>': <exit error>. Output: <output>" (tofu's
// internal/builtin/provisioners/local-exec).
const (
	localExecSummary = "local-exec provisioner error"
	localExecOutput  = ". Output: "
)

// CodeText is the text of d to look for error codes in: for a failed local-exec provisioner
// only its output, so words in the module's command line do not count.
func (d Diagnostic) CodeText() string {
	if d.Summary == localExecSummary {
		if _, output, ok := strings.Cut(d.Detail, localExecOutput); ok {
			return output
		}
	}
	return d.Summary + " " + d.Detail
}

func (d Diagnostic) text() string {
	if d.Summary == localExecSummary {
		// The command line is the module's own text; what it printed says what broke, and
		// the end of that the most.
		if _, output, ok := strings.Cut(d.Detail, localExecOutput); ok {
			output = strings.Join(strings.Fields(output), " ")
			return d.Summary + ": " + message.KeepEnd(output, message.MaxLength-len(localExecSummary)-8)
		}
	}
	if d.Detail == "" {
		return d.Summary
	}
	return d.Summary + ": " + d.Detail
}

// NewRunError is a run error of class with msg as a message (message.Short).
func NewRunError(class ErrorClass, msg string) *RunError {
	return &RunError{Class: class, Message: message.Short(msg)}
}
