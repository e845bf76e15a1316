// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"io"
	"os"
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
		{args: []string{"check"}, code: 2, stderr: "usage: fulfiller module check [--tofu PATH] [--apply"},
		{args: []string{"lint", template}, code: 2, stderr: "usage: fulfiller module check [--tofu PATH] [--apply"},
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

// `module check --apply` applies a module that keeps the contract once and destroys what it
// made; a failed apply is destroyed too and exits 1.
func TestModuleCheckCommandApply(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params []string
		code   int
		stdout []string
		// destroyed: the module's destroy-time provisioner ran (tofu runs none for a
		// resource whose creation failed: it is tainted, and destroyed without them)
		destroyed bool
	}{
		{name: "round trip", code: 0, destroyed: true, stdout: []string{": apply made provider ID sim://module-check/", ": destroy removed what the apply made"}},
		{name: "failed apply", params: []string{"--var", "fail_with=resource_unavailable: sold out"}, code: 1,
			stdout: []string{": apply failed: ", "sold out", ": destroy removed what the apply made"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			record := t.TempDir()
			logFile := filepath.Join(t.TempDir(), "runs.log")
			args := append([]string{"check", "--apply", "--tofu", tofuPath(t), "--log", logFile, "--var", "record_dir=" + record}, tc.params...)
			args = append(args, moduleDir(t, "node"))
			var stdout, stderr bytes.Buffer
			if code := ModuleMain(args, &stdout, &stderr); code != tc.code {
				t.Fatalf("exit code %d, want %d\nstdout %s\nstderr %s", code, tc.code, stdout.String(), stderr.String())
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout %q lacks %q", stdout.String(), want)
				}
			}
			if _, err := os.Stat(filepath.Join(record, "destroyed")); tc.destroyed && err != nil {
				t.Errorf("the destroy did not reach the machine: %v", err)
			}
			log := testenv.ReadFile(t, logFile)
			if !strings.Contains(log, "apply of run module-check-apply-1") || !strings.Contains(log, "destroy of run module-check-destroy-1 succeeded") {
				t.Errorf("the runs' log:\n%s", log)
			}
		})
	}
}
