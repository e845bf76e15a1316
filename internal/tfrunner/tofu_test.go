// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-version"
)

// TestFindTofu locates the pinned tofu by path and by name in PATH, reads its version with the
// OpenTofu product definition, and rejects what is missing, not executable or too old, each
// with an error that says which binary and why.
func TestFindTofu(t *testing.T) {
	ctx := context.Background()
	tofu := tofuPath(t)
	path, v, err := FindTofu(ctx, tofu)
	if err != nil {
		t.Fatal(err)
	}
	if path != tofu || v.String() != "1.12.6" {
		t.Errorf("FindTofu(%s) = %s %s, want the pinned 1.12.6 at that path", tofu, path, v)
	}
	t.Setenv("PATH", filepath.Dir(tofu))
	if byName, _, err := FindTofu(ctx, "tofu"); err != nil || byName != tofu {
		t.Errorf("FindTofu(tofu) in PATH = %s, %v; want %s", byName, err, tofu)
	}

	dir := t.TempDir()
	notExecutable := filepath.Join(dir, "tofu")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old-tofu")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho '{\"terraform_version\": \"1.11.4\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{filepath.Join(dir, "missing"), "is not an executable file"},
		{notExecutable, "is not an executable file"},
		{"no-such-tofu", `"no-such-tofu" is not an executable file or not in PATH`},
		{old, "tofu 1.11.4 at " + old + " is outside the supported range >= 1.12.0, < 2.0.0"},
	} {
		_, _, err := FindTofu(ctx, tc.name)
		if !errors.Is(err, ErrUnsupportedTofu) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FindTofu(%s) = %v, want ErrUnsupportedTofu saying %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckTofuVersion(t *testing.T) {
	for v, ok := range map[string]bool{"1.12.0": true, "1.12.6": true, "1.13.2": true, "1.11.9": false, "2.0.0": false, "1.12.0-rc1": false} {
		err := CheckTofuVersion("/t/tofu", version.Must(version.NewVersion(v)))
		if (err == nil) != ok {
			t.Errorf("CheckTofuVersion(%s) = %v, want supported %v", v, err, ok)
		}
	}
}

// TestListMirror reads both filesystem mirror layouts and the mirrors a CLI configuration names.
func TestListMirror(t *testing.T) {
	dir := t.TempDir()
	mirror := filepath.Join(dir, "mirror")
	for _, f := range []string{
		"registry.opentofu.org/hetznercloud/hcloud/1.58.0/linux_amd64/terraform-provider-hcloud_v1.58.0",
		"registry.opentofu.org/hetznercloud/hcloud/1.58.0/linux_arm64/terraform-provider-hcloud_v1.58.0",
		"example.com/acme/thing/terraform-provider-thing_2.1.0_linux_amd64.zip",
		"example.com/acme/thing/README",
	} {
		p := filepath.Join(mirror, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rc := filepath.Join(dir, "tofurc")
	if err := os.WriteFile(rc, []byte(`
plugin_cache_dir = "/work/plugins"
provider_installation {
  filesystem_mirror {
    path    = "`+mirror+`"
    include = ["*/*/*"]
  }
  network_mirror {
    url = "https://mirror.example.com/"
  }
  filesystem_mirror {
    path = "`+filepath.Join(dir, "absent")+`"
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	mirrors, err := FilesystemMirrors(rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(mirrors) != 2 || mirrors[0] != mirror {
		t.Fatalf("FilesystemMirrors = %q, want %s and the absent one", mirrors, mirror)
	}
	var got []string
	for _, m := range mirrors {
		found, err := ListMirror(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range found {
			got = append(got, p.String())
		}
	}
	want := []string{
		"example.com/acme/thing 2.1.0 (linux_amd64)",
		"registry.opentofu.org/hetznercloud/hcloud 1.58.0 (linux_amd64)",
		"registry.opentofu.org/hetznercloud/hcloud 1.58.0 (linux_arm64)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mirrored providers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := os.WriteFile(rc, []byte("provider_installation {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FilesystemMirrors(rc); err == nil {
		t.Error("FilesystemMirrors read a broken CLI configuration")
	}
}

// TestRunRejectsUnsupportedTofu: a runner given a tofu outside SupportedTofu, or none, fails
// before tofu touches the state, with the binary and the range in the error.
func TestRunRejectsUnsupportedTofu(t *testing.T) {
	old := filepath.Join(t.TempDir(), "tofu")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho '{\"terraform_version\": \"1.11.4\", \"platform\": \"linux_amd64\", \"provider_selections\": {}}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for tofu, want := range map[string]string{
		old:                 "tofu 1.11.4 at " + old + " is outside the supported range " + SupportedTofu,
		"/nonexistent/tofu": `tofu "/nonexistent/tofu" is not an executable file`,
	} {
		req := nodeRequest(t, "old-tofu", "node", filepath.Join(t.TempDir(), "state"), nil)
		req.TofuPath = tofu
		var log strings.Builder
		res := Run(context.Background(), req, &log, testRules)
		if res.Succeeded || res.Error == nil || !strings.Contains(res.Error.Message, want) {
			t.Errorf("run with tofu %s: %+v, want a failure saying %q\n%s", tofu, res.Error, want, log.String())
		}
	}
}
