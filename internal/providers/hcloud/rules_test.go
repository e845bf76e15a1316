// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// errExit stands for what tfexec returns when tofu exits with status 1.
var errExit = errors.New("exit status 1")

func readFixture(t *testing.T, name string) []tfrunner.Diagnostic {
	t.Helper()
	f, err := os.Open(filepath.Join(fixtureDir, name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var diags []tfrunner.Diagnostic
	scanner := bufio.NewScanner(f)
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		d, ok := tfrunner.ParseDiagnostic(scanner.Bytes())
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

// The golden fixtures of Hetzner Cloud failures get their classes from the family's rules;
// the generic rules alone know only the HTTP and network words among them.
func TestRulesClassifyFixtures(t *testing.T) {
	for fixture, want := range map[string]struct{ family, generic tfrunner.ErrorClass }{
		"local-exec-resource-unavailable": {tfrunner.Capacity, tfrunner.Unknown},
		"local-exec-placement-error":      {tfrunner.Capacity, tfrunner.Unknown},
		"local-exec-server-limit":         {tfrunner.Quota, tfrunner.Unknown},
		"local-exec-resource-limit":       {tfrunner.Quota, tfrunner.Unknown},
		"local-exec-unauthorized":         {tfrunner.Credentials, tfrunner.Credentials},
		"local-exec-forbidden":            {tfrunner.Credentials, tfrunner.Credentials},
		"local-exec-rate-limit":           {tfrunner.Transient, tfrunner.Unknown},
		"local-exec-action-locked":        {tfrunner.Transient, tfrunner.Unknown},
		"local-exec-api-timeout":          {tfrunner.Transient, tfrunner.Transient},
		"local-exec-service-unavailable":  {tfrunner.Transient, tfrunner.Transient},
		"local-exec-unexplained":          {tfrunner.Unknown, tfrunner.Unknown},
		// The real provider against the stand-in (TestHcloudProviderDiagnostics).
		"hcloud-resource-unavailable": {tfrunner.Capacity, tfrunner.Unknown},
		"hcloud-placement-error":      {tfrunner.Capacity, tfrunner.Unknown},
		"hcloud-resource-limit":       {tfrunner.Quota, tfrunner.Unknown},
		"hcloud-invalid-location":     {tfrunner.InvalidModule, tfrunner.Unknown},
		"hcloud-unknown-server-type":  {tfrunner.InvalidModule, tfrunner.Unknown},
		"hcloud-unknown-image":        {tfrunner.InvalidModule, tfrunner.Unknown},
		"hcloud-unauthorized":         {tfrunner.Credentials, tfrunner.Credentials},
		"hcloud-token-malformed":      {tfrunner.Credentials, tfrunner.Unknown},
		"hcloud-rate-limit":           {tfrunner.Transient, tfrunner.Unknown},
		"hcloud-server-error":         {tfrunner.Transient, tfrunner.Unknown},
		"hcloud-locked":               {tfrunner.Transient, tfrunner.Unknown},
	} {
		t.Run(fixture, func(t *testing.T) {
			diags := readFixture(t, fixture)
			got := tfrunner.Classify(diags, errExit, hcloudrules.Rules{})
			if got == nil || got.Class != want.family {
				t.Fatalf("Classify() = %v, want class %s", got, want.family)
			}
			if got.Message == "" || strings.Contains(got.Message, "\n") || len(got.Message) > v1alpha1.MaxMessageLength {
				t.Errorf("message %q is not one bounded line", got.Message)
			}
			if !strings.HasPrefix(got.Message, diags[0].Summary) {
				t.Errorf("message %q does not start with the diagnostic's summary", got.Message)
			}
			if generic := tfrunner.Classify(diags, errExit, nil); generic.Class != want.generic {
				t.Errorf("without the family's rules: %s, want %s", generic.Class, want.generic)
			}
		})
	}
}

func TestRules(t *testing.T) {
	diag := func(summary, detail string) tfrunner.Diagnostic {
		return tfrunner.Diagnostic{Severity: "error", Summary: summary, Detail: detail}
	}
	localExec := func(output string) tfrunner.Diagnostic {
		return diag("local-exec provisioner error", "Error running command 'hcloud server create --timeout 5m': exit status 1. Output: "+output)
	}
	for _, tc := range []struct {
		name string
		d    tfrunner.Diagnostic
		want tfrunner.ErrorClass // "" when the rules do not know it
	}{
		{"rate limit is not quota", localExec("rate_limit_exceeded"), tfrunner.Transient},
		{"credentials before capacity", localExec("401 (resource_unavailable)"), tfrunner.Credentials},
		{"capacity before transient", localExec("resource_unavailable after timeout"), tfrunner.Capacity},
		{"rejected input is the module's", localExec("error: invalid_input: invalid input in field 'server_type'"), tfrunner.InvalidModule},
		{"invalid input before transient", localExec("invalid_input (conflict)"), tfrunner.InvalidModule},
		{"a provider's lookup", diag("server type cx99 not found", ""), tfrunner.InvalidModule},
		{"phrases need all their words", diag("server type cx23 is gone", ""), ""},
		{"codes before phrases", diag("SSH key not found (unauthorized, 0123456789abcdef)", ""), tfrunner.Credentials},
		{"numbers are whole words", localExec("server 4012 failed"), ""},
		{"the command line is not output", diag("local-exec provisioner error", "Error running command 'echo resource_unavailable': exit status 1. Output: boom"), ""},
	} {
		got, ok := hcloudrules.Rules{}.Classify(tc.d)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("%s: Classify() = %q, %v, want %q", tc.name, got, ok, tc.want)
		}
	}
}
