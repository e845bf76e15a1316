package tfrunner

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
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

// tokenRules map well-known error codes and phrases, as they appear in provider and backend
// error text, to classes. The classes are tried in this order; within a text, a token matches
// as a whole word (case-insensitive), so rate_limit_exceeded is not limit_exceeded. Codes are
// those of the Hetzner Cloud API plus generic HTTP and network phrases.
var tokenRules = []struct {
	class  ErrorClass
	tokens []string
}{
	{Credentials, []string{"unauthorized", "401", "403", "forbidden", "invalid token", "token is invalid", "token_readonly",
		"invalid credentials", "authentication failed", "access denied",
		// State encryption (internal/encryption/base.go): a wrong key, or a plaintext state
		// where encryption is enforced without a fallback.
		"decryption failed", "unencrypted payload without unencrypted method configured"}},
	{Quota, []string{"limit_exceeded", "server_limit_exceeded", "resource_limit_exceeded", "quota",
		"quota_exceeded", "quotaexceeded"}},
	{Capacity, []string{"resource_unavailable", "placement_error", "insufficient capacity",
		"insufficient_capacity", "insufficientcapacity", "insufficientinstancecapacity", "out of capacity"}},
	{InvalidModule, []string{"invalid_input", "json_error", "uniqueness_error"}},
	{Transient, []string{"rate_limit_exceeded", "too many requests", "429", "timeout", "timed out",
		"connection refused", "connection reset", "no such host", "service unavailable", "502", "503", "504",
		"conflict", "locked", "server_error", "service_error", "maintenance", "temporarily unavailable"}},
}

// phraseRules recognise errors a provider makes itself, by all of their words (each a
// whole word or phrase, case-insensitive). They are tried after tokenRules. The Hetzner
// Cloud provider looks up names before it creates a server and reports what it did not find
// (terraform-provider-hcloud internal/server/resource.go).
var phraseRules = []struct {
	class ErrorClass
	words []string
}{
	{InvalidModule, []string{"server type", "not found"}},
	{InvalidModule, []string{"image", "for architecture", "not found"}},
	{InvalidModule, []string{"ssh key not found"}},
	{InvalidModule, []string{"placement group not found"}},
}

// Classify turns the error diagnostics of a run and the error tfexec returned into a
// RunError, or nil when the run succeeded. Rules, first match wins: the run's context
// (cancelled, deadline), errors of this package (invalid module or request), the state-lock
// diagnostic, configuration diagnostics, error codes in the diagnostics' text, then a
// provider's own phrases.
func Classify(diags []Diagnostic, runErr error) *RunError {
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
		return newRunError(InvalidModule, runErr.Error())
	}
	for _, d := range errs {
		if d.Summary == lockSummary || strings.Contains(d.Detail, lockInfoHeader) {
			return newRunError(LockHeld, d.text())
		}
	}
	for _, d := range errs {
		if isInvalidModuleSummary(d.Summary) {
			return newRunError(InvalidModule, d.text())
		}
	}
	for _, rule := range tokenRules {
		for _, d := range errs {
			text := strings.ToLower(d.codeText())
			for _, token := range rule.tokens {
				if containsWord(text, token) {
					return newRunError(rule.class, d.text())
				}
			}
		}
	}
	for _, rule := range phraseRules {
		for _, d := range errs {
			if containsAllWords(strings.ToLower(d.codeText()), rule.words) {
				return newRunError(rule.class, d.text())
			}
		}
	}
	if len(errs) > 0 {
		return newRunError(Unknown, errs[0].text())
	}
	return newRunError(Unknown, runErr.Error())
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

func containsAllWords(text string, words []string) bool {
	for _, w := range words {
		if !containsWord(text, w) {
			return false
		}
	}
	return true
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

// codeText is the text to look for error codes in: for a failed local-exec provisioner only
// its output, so words in the module's command line do not count.
func (d Diagnostic) codeText() string {
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
			if tailLen := v1alpha1.MaxMessageLength - len(localExecSummary) - 8; len(output) > tailLen {
				start := len(output) - tailLen
				for start < len(output) && !utf8.RuneStart(output[start]) {
					start++
				}
				output = "…" + output[start:]
			}
			return d.Summary + ": " + output
		}
	}
	if d.Detail == "" {
		return d.Summary
	}
	return d.Summary + ": " + d.Detail
}

func newRunError(class ErrorClass, msg string) *RunError {
	return &RunError{Class: class, Message: v1alpha1.ShortMessage(msg)}
}
