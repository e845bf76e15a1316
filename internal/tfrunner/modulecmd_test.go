// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleCheckCommand: `fulfiller module check` prints each violation with the module's
// file and line and exits 1; a module that keeps the contract exits 0; bad usage exits 2.
func TestModuleCheckCommand(t *testing.T) {
	broken := moduleDir(t, "broken-contract")
	template := filepath.Join("..", "..", "modules", "template")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{args: []string{"check", broken}, code: 1, stderr: "7 violation(s)", stdout: []string{
			broken + ": the module has no output provider_id\n",
			filepath.Join(broken, "main.tf") + `:3: the module keeps a backend "s3" block`,
			filepath.Join(broken, "main.tf") + `:20: variable "image" is required`,
		}},
		{args: []string{"check", template}, code: 0, stdout: []string{template + ": keeps the module contract\n"}},
		{args: []string{"check", moduleDir(t, "syntax-error")}, code: 1, stderr: "main.tf:"},
		{args: []string{"check", filepath.Join(t.TempDir(), "missing")}, code: 2, stderr: "is not a folder"},
		{args: []string{"check"}, code: 2, stderr: "usage: fulfiller module check DIR"},
		{args: []string{"lint", template}, code: 2, stderr: "usage: fulfiller module check DIR"},
	} {
		var stdout, stderr bytes.Buffer
		if code := ModuleMain(tc.args, &stdout, &stderr); code != tc.code {
			t.Errorf("%v: exit code %d, want %d (stdout %q, stderr %q)", tc.args, code, tc.code, stdout.String(), stderr.String())
		}
		for _, want := range tc.stdout {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%v: stdout %q lacks %q", tc.args, stdout.String(), want)
			}
		}
		if tc.stdout == nil && stdout.Len() > 0 {
			t.Errorf("%v: stdout %q, want none", tc.args, stdout.String())
		}
		if !strings.Contains(stderr.String(), tc.stderr) || (tc.stderr == "") != (stderr.Len() == 0) {
			t.Errorf("%v: stderr %q, want it to contain %q", tc.args, stderr.String(), tc.stderr)
		}
	}
}
