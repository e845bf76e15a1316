// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// errExit stands for what tfexec returns when tofu exits with status 1.
var errExit = errors.New("exit status 1")

// fixtureDir holds real tofu `-json` error diagnostics, one file per provoked failure, that
// TestClassifyFixtures classifies (fixtures_test.go, built with -tags capture, makes them).
const fixtureDir = "testdata/diagnostics"

// simulatedAPIErrors are what the simulated API prints before failing, in the two shapes
// real tools print Hetzner Cloud API errors: "code: message" (hcloud CLI) and
// "message (code, correlation id)" (terraform-provider-hcloud). Their fixtures
// (local-exec-*) are the hcloud family's: internal/providers/hcloud classifies them with its
// rules.
var simulatedAPIErrors = map[string]string{
	"resource-unavailable": "resource_unavailable: server type cx22 unavailable in fsn1",
	"placement-error":      "error during placement (placement_error, 5c2d1bcf0a7b3e41)",
	"server-limit":         "server limit exceeded: please contact support (server_limit_exceeded, 91ad7c2e3f4b5d60)",
	"resource-limit":       "project limit of 10 primary IPs reached (resource_limit_exceeded, 0b1c2d3e4f506172)",
	"unauthorized":         "unable to authenticate (unauthorized, 7d8e9fa0b1c2d3e4)",
	"forbidden":            "insufficient permissions for this request (forbidden, 1a2b3c4d5e6f7081)",
	"rate-limit":           "limit of 3600 requests per hour reached (rate_limit_exceeded, 2b3c4d5e6f708192)",
	"action-locked":        "server is locked by another action (locked, 3c4d5e6f708192a3)",
	"api-timeout":          "Post \"https://api.hetzner.cloud/v1/servers\": dial tcp 213.239.246.1:443: i/o timeout",
	"service-unavailable":  "unexpected response 503 Service Unavailable",
	"unexplained":          "something went wrong",
}

func readFixture(t *testing.T, name string) []Diagnostic {
	t.Helper()
	f, err := os.Open(filepath.Join(fixtureDir, name+".jsonl"))
	if err != nil {
		t.Fatalf("%v (capture fixtures with: go test -tags capture -run TestCaptureFixtures ./internal/tfrunner/)", err)
	}
	defer func() { _ = f.Close() }()
	var diags []Diagnostic
	scanner := bufio.NewScanner(f)
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		d, ok := ParseDiagnostic(scanner.Bytes())
		if !ok {
			t.Fatalf("%s: not a diagnostic: %s", name, scanner.Text())
		}
		diags = append(diags, d)
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return diags
}

// Real diagnostics captured from the pinned tofu (fixtures_test.go).
func TestClassifyFixtures(t *testing.T) {
	for fixture, want := range map[string]ErrorClass{
		"state-locked":                        LockHeld,
		"kubernetes-state-locked-init":        LockHeld,
		"encrypted-state-wrong-key":           Credentials,
		"plaintext-state-encryption-enforced": Credentials,
		"syntax-error":                        InvalidModule,
		"undeclared-reference":                InvalidModule,
		"unsupported-argument":                InvalidModule,
		"required-variable":                   InvalidModule,
		"invalid-value":                       InvalidModule,
	} {
		t.Run(fixture, func(t *testing.T) {
			diags := readFixture(t, fixture)
			got := Classify(diags, errExit, nil)
			if got == nil || got.Class != want {
				t.Fatalf("Classify() = %v, want class %s", got, want)
			}
			if got.Message == "" || strings.Contains(got.Message, "\n") || len(got.Message) > v1alpha1.MaxMessageLength {
				t.Errorf("message %q is not one bounded line", got.Message)
			}
			if !strings.HasPrefix(got.Message, diags[0].Summary) {
				t.Errorf("message %q does not start with the diagnostic's summary", got.Message)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	diag := func(summary, detail string) Diagnostic {
		return Diagnostic{Severity: "error", Summary: summary, Detail: detail}
	}
	localExec := func(output string) Diagnostic {
		return diag(localExecSummary, "Error running command 'hcloud server create --timeout 5m': exit status 1. Output: "+output)
	}
	lock := diag(lockSummary, "Lock Info: ...")
	for _, tc := range []struct {
		name   string
		diags  []Diagnostic
		err    error
		rules  Rules
		want   ErrorClass // "" for success
		substr string
	}{
		{name: "success", diags: nil, err: nil},
		{name: "warnings only", diags: []Diagnostic{{Severity: "warning", Summary: "Value for undeclared variable"}}},
		{name: "cancelled wins", diags: []Diagnostic{lock}, err: fmt.Errorf("tofu apply: %w", context.Canceled), want: Cancelled},
		{name: "deadline", err: fmt.Errorf("tofu apply: %w", context.DeadlineExceeded), want: Timeout},
		{name: "invalid module error", err: fmt.Errorf("%w: no output provider_id", ErrInvalidModule), want: InvalidModule, substr: "no output provider_id"},
		{name: "invalid request", err: fmt.Errorf("%w: bad env", ErrInvalidRequest), want: InvalidModule},
		{name: "lock before module errors", diags: []Diagnostic{diag("Unsupported argument", ""), lock}, err: errExit, want: LockHeld},
		{name: "module before codes", diags: []Diagnostic{localExec("unauthorized"), diag("Duplicate backend configuration", "")}, err: errExit, want: InvalidModule},
		{name: "a cloud's codes are its family's", diags: []Diagnostic{localExec("resource_unavailable: server type cx22 unavailable")}, err: errExit, want: Unknown},
		{name: "family rules", diags: []Diagnostic{localExec("resource_unavailable")}, err: errExit, rules: codeRules{"resource_unavailable": Capacity}, want: Capacity},
		{name: "family rules before generic", diags: []Diagnostic{localExec("503 resource_unavailable")}, err: errExit, rules: codeRules{"resource_unavailable": Capacity}, want: Capacity},
		{name: "family rules after the lock", diags: []Diagnostic{localExec("resource_unavailable"), lock}, err: errExit, rules: codeRules{"resource_unavailable": Capacity}, want: LockHeld},
		{name: "generic rules when the family's know nothing", diags: []Diagnostic{localExec("connection refused")}, err: errExit, rules: codeRules{"resource_unavailable": Capacity}, want: Transient},
		{name: "family rules explain", diags: []Diagnostic{diag("failed to apply: "+strings.Repeat("context ", 60)+"resource_unavailable here", "")}, err: errExit,
			rules: explainingRules{codeRules{"resource_unavailable": Capacity}}, want: Capacity, substr: "resource_unavailable here"},
		{name: "an empty explanation keeps the text", diags: []Diagnostic{localExec("resource_unavailable")}, err: errExit,
			rules: explainingRules{codeRules{"resource_unavailable": Capacity}}, want: Capacity, substr: "resource_unavailable"},
		{name: "credentials before transient", diags: []Diagnostic{localExec("401 after timeout")}, err: errExit, want: Credentials},
		{name: "numbers are whole words", diags: []Diagnostic{localExec("server 4012 failed")}, err: errExit, want: Unknown},
		{name: "command line is not output", diags: []Diagnostic{localExec("boom")}, err: errExit, want: Unknown, substr: "boom"},
		{name: "backend error", diags: []Diagnostic{diag("Error loading state", `secrets "tfstate-default-x" is forbidden: User "system:serviceaccount:x:y" cannot get resource "secrets"`)}, err: errExit, want: Credentials},
		{name: "backend unreachable", diags: []Diagnostic{diag("Error loading state", "dial tcp 10.0.0.1:6443: connect: connection refused")}, err: errExit, want: Transient},
		{name: "no diagnostics", err: errors.New("exit status 2\nError: something on stderr"), want: Unknown, substr: "exit status 2 Error: something on stderr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.diags, tc.err, tc.rules)
			if tc.want == "" {
				if got != nil {
					t.Fatalf("Classify() = %v, want nil", got)
				}
				return
			}
			if got == nil || got.Class != tc.want || !strings.Contains(got.Message, tc.substr) {
				t.Fatalf("Classify() = %v, want class %s with %q", got, tc.want, tc.substr)
			}
		})
	}
}

func TestClassifyBoundsMessage(t *testing.T) {
	got := Classify([]Diagnostic{{Severity: "error", Summary: "boom", Detail: strings.Repeat("é\n", 400)}}, errExit, nil)
	if len(got.Message) > v1alpha1.MaxMessageLength || strings.Contains(got.Message, "\n") || !strings.HasSuffix(got.Message, "…") {
		t.Errorf("message (%d bytes) = %q", len(got.Message), got.Message)
	}
}

func TestErrorClassPredicates(t *testing.T) {
	for _, tc := range []struct {
		class                         ErrorClass
		retryable, terminal, capacity bool
	}{
		{Capacity, false, false, true},
		{Quota, false, false, true},
		{LockHeld, true, false, false},
		{Credentials, false, true, false},
		{InvalidModule, false, true, false},
		{Transient, true, false, false},
		{Timeout, true, false, false},
		{Cancelled, false, false, false},
		{Unknown, false, false, false},
	} {
		if tc.class.Retryable() != tc.retryable || tc.class.Terminal() != tc.terminal || tc.class.InsufficientCapacity() != tc.capacity {
			t.Errorf("%s: retryable %v, terminal %v, capacity %v", tc.class, tc.class.Retryable(), tc.class.Terminal(), tc.class.InsufficientCapacity())
		}
	}
}
