// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// countingMirror is a filesystem mirror whose hcloud provider is the tools' one behind a
// wrapper that appends its pid to a file for every start, and the CLI configuration using
// it: launches reads that file.
func countingMirror(t *testing.T) (rc string, launches func() []string) {
	t.Helper()
	const rel = "registry.opentofu.org/hetznercloud/hcloud/1.58.0/linux_amd64"
	real, err := filepath.Glob(filepath.Join(filepath.Dir(testenv.ToolsBin()), "providers", rel, "terraform-provider-hcloud*"))
	if err != nil || len(real) != 1 {
		t.Fatalf("the tools' hcloud provider (make tools): %v %v", real, err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "launches")
	folder := filepath.Join(dir, "mirror", filepath.FromSlash(rel))
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\necho $$ >> %q\nexec %q \"$@\"\n", log, real[0])
	if err := os.WriteFile(filepath.Join(folder, filepath.Base(real[0])), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	rc = filepath.Join(dir, "tofurc")
	config := fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path    = %q\n    include = [\"*/*/*\"]\n  }\n}\n", filepath.Join(dir, "mirror"))
	if err := os.WriteFile(rc, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return rc, func() []string {
		data, _ := os.ReadFile(log)
		_ = os.Remove(log)
		return strings.Fields(string(data))
	}
}

// TestModuleProviderProcesses counts the hcloud provider's processes per run of
// modules/hetzner-cloud against the stand-in: one per run with the runner shortcuts (the
// runner's, which tofu reattaches to for every step), several when tofu starts them itself (by
// default, or with the shortcuts for a module with a second, aliased hcloud configuration). Each run creates or deletes its
// server either way.
func TestModuleProviderProcesses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, _ := startStandIn(t, standin.Options{})
	rc, launches := countingMirror(t)

	aliased := t.TempDir()
	for _, name := range []string{"main.tf", "outputs.tf", "variables.tf", "versions.tf"} {
		data, err := os.ReadFile(filepath.Join(moduleDir(t), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(aliased, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(aliased, "other.tf"), []byte(`provider "hcloud" {
  alias = "other"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name        string
		tofuStarts  bool
		module      string
		oneProcess  bool
		notSharedBy string
	}{
		{name: "one process per run", oneProcess: true},
		{name: "tofu starts them by default", tofuStarts: true},
		{name: "an aliased configuration", module: aliased, notSharedBy: "alias hcloud.other"},
	} {
		node := "providers-" + strings.ReplaceAll(tc.name, " ", "-")
		data, _ := userData(ctx, t, node)
		req := moduleRequest(t, s, node, "nbg1", "cx23", nil, data)
		req.Env["TF_CLI_CONFIG_FILE"] = rc
		req.Shortcuts = !tc.tofuStarts
		if tc.module != "" {
			req.ModuleDir = tc.module
		}
		for _, op := range []tfrunner.Operation{tfrunner.Apply, tfrunner.Destroy} {
			req.Operation, req.Name, req.WorkDir = op, node+"-"+string(op), t.TempDir()
			log := &testenv.SyncBuffer{}
			res := tfrunner.Run(ctx, req, log, rules)
			if !res.Succeeded {
				t.Fatalf("%s: %s failed: %v\n%s", tc.name, op, res.Error, log.String())
			}
			pids := launches()
			var cpu time.Duration
			for _, ph := range res.Phases {
				if ph.Name == string(op) {
					cpu = ph.CPU
				}
			}
			t.Logf("%s: %s started the provider %d times; the step cost %s of CPU (runner, tofu, providers)", tc.name, op, len(pids), cpu.Round(time.Millisecond))
			note := "one process for the run of each provider: registry.opentofu.org/hetznercloud/hcloud (pid "
			switch {
			case tc.oneProcess && (len(pids) != 1 || !strings.Contains(log.String(), note+pids[0]+")")):
				t.Errorf("%s: %s started the provider as %v, want once, by the runner; log:\n%s", tc.name, op, pids, log.String())
			case !tc.oneProcess && (len(pids) < 3 || strings.Contains(log.String(), note)):
				t.Errorf("%s: %s started the provider as %v, want tofu's starts (schemas, validation, plan, apply); log:\n%s", tc.name, op, pids, log.String())
			case tc.notSharedBy != "" && !strings.Contains(log.String(), "registry.opentofu.org/hetznercloud/hcloud: "+tc.notSharedBy):
				t.Errorf("%s: the log does not say why tofu starts the provider:\n%s", tc.name, log.String())
			}
		}
		for _, srv := range s.Servers() {
			if srv.Name == node {
				t.Errorf("%s: server %s left after the destroy", tc.name, node)
			}
		}
	}
}
