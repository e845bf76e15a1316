// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
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
		{args: []string{"check"}, code: 2, stderr: "usage: fulfiller module check [--tofu PATH] DIR|SOURCE"},
		{args: []string{"lint", template}, code: 2, stderr: "usage: fulfiller module check [--tofu PATH] DIR|SOURCE"},
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

// A source is fetched as a class fetches it and its files checked, violations named by the
// file's path in the source; one that cannot be fetched exits 1.
func TestModuleCheckCommandSource(t *testing.T) {
	repo := testenv.NewGitRepo(t)
	repo.Commit(moduleDir(t, "broken-contract"), "broken", "v1")
	repo.Commit(filepath.Join("..", "..", "modules", "template"), "template", "v1")
	tofu := []string{"--tofu", tofuPath(t)}
	broken := "git::file://" + repo.Bare + "//broken?ref=v1"
	var stdout, stderr bytes.Buffer
	if code := ModuleMain(append(append([]string{"check"}, tofu...), broken), &stdout, &stderr); code != 1 ||
		!strings.Contains(stdout.String(), broken+`: main.tf:3: the module keeps a backend "s3" block`) || !strings.Contains(stderr.String(), "at commit ") {
		t.Errorf("exit %d, stdout %q, stderr %q; want the violations by file and line", code, stdout.String(), stderr.String())
	}
	good := "git::" + repo.Serve() + "//template?ref=v1"
	stdout.Reset()
	stderr.Reset()
	if code := ModuleMain(append(append([]string{"check"}, tofu...), good), &stdout, &stderr); code != 0 || stdout.String() != good+": keeps the module contract\n" {
		t.Errorf("the template over HTTP: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	if code := ModuleMain(append(append([]string{"check"}, tofu...), "git::file://"+repo.Bare+"x?ref=v1"), io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "cannot be fetched") {
		t.Errorf("an unfetchable source: exit %d, stderr %q", code, stderr.String())
	}
}

// `fulfiller module check` passes every shipped module and the template, as CI runs it.
func TestModuleCheckCommandPassesShippedModules(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "modules", "*", "main.tf"))
	if err != nil || len(dirs) < 5 {
		t.Fatalf("shipped modules: %v, %v", dirs, err)
	}
	for _, main := range dirs {
		var stdout, stderr bytes.Buffer
		if code := ModuleMain([]string{"check", filepath.Dir(main)}, &stdout, &stderr); code != 0 {
			t.Errorf("%s: exit %d\n%s%s", filepath.Dir(main), code, stdout.String(), stderr.String())
		}
	}
}
