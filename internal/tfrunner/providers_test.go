// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
)

func TestProviderAddr(t *testing.T) {
	for source, want := range map[string]string{
		"hetznercloud/hcloud":                       "registry.opentofu.org/hetznercloud/hcloud",
		"HetznerCloud/HCloud":                       "registry.opentofu.org/hetznercloud/hcloud",
		"registry.terraform.io/hetznercloud/hcloud": "registry.terraform.io/hetznercloud/hcloud",
		"null":                   "registry.opentofu.org/hashicorp/null",
		"example.com/acme/thing": "example.com/acme/thing",
	} {
		if got := providerAddr(source); got != want {
			t.Errorf("providerAddr(%q) = %q, want %q", source, got, want)
		}
	}
}

// workDir lays out a working directory as `tofu init` leaves it: the root module's files,
// the installed modules (modules.json, if any) and the providers, each a folder
// .terraform/providers/<addr>/<version>/<platform>/ with the given files (executable unless
// their name ends in .txt).
func workDir(t *testing.T, files map[string]string, modules map[string]string, providers map[string][]string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(path, content string, perm os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), perm); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range files {
		write(filepath.Join(dir, name), content, 0o644)
	}
	if len(modules) > 0 {
		manifest := `{"Modules":[{"Key":"","Source":"","Dir":"."}`
		for key, moduleDir := range modules {
			manifest += fmt.Sprintf(`,{"Key":%q,"Source":"./%s","Dir":%q}`, key, moduleDir, moduleDir)
		}
		write(filepath.Join(dir, dataDir, "modules", "modules.json"), manifest+"]}", 0o644)
	}
	platform := runtime.GOOS + "_" + runtime.GOARCH
	for addrVersion, bins := range providers {
		folder := filepath.Join(dir, dataDir, "providers", filepath.FromSlash(addrVersion), platform)
		if err := os.MkdirAll(folder, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, bin := range bins {
			perm := os.FileMode(0o755)
			if strings.HasSuffix(bin, ".txt") {
				perm = 0o644
			}
			write(filepath.Join(folder, bin), "#!/bin/sh\n", perm)
		}
	}
	return dir
}

const hcloudRequired = `terraform {
  required_providers {
    hcloud = { source = "hetznercloud/hcloud" }
  }
}
`

func TestShareableProviders(t *testing.T) {
	hcloud := map[string][]string{"registry.opentofu.org/hetznercloud/hcloud/1.58.0": {"terraform-provider-hcloud_v1.58.0", "LICENSE.txt"}}
	const hcloudAddr = "registry.opentofu.org/hetznercloud/hcloud"
	for _, tc := range []struct {
		name      string
		files     map[string]string
		modules   map[string]string
		providers map[string][]string
		shared    []string
		notShared string // the reason given, "" for none
	}{{
		name:      "no provider block: tofu configures it empty, once",
		files:     map[string]string{"main.tf": hcloudRequired},
		providers: hcloud,
		shared:    []string{hcloudAddr},
	}, {
		name:      "one provider block",
		files:     map[string]string{"main.tf": hcloudRequired + `provider "hcloud" { poll_interval = "1s" }`},
		providers: hcloud,
		shared:    []string{hcloudAddr},
	}, {
		name:      "an alias: two configurations",
		files:     map[string]string{"main.tf": hcloudRequired + `provider "hcloud" {}` + "\n" + `provider "hcloud" { alias = "eu" }`},
		providers: hcloud,
		notShared: hcloudAddr + ": alias hcloud.eu",
	}, {
		name: "a module's configuration aliases",
		files: map[string]string{"main.tf": hcloudRequired + `module "net" { source = "./net" }`,
			"net/main.tf": `terraform {
  required_providers {
    hcloud = { source = "hetznercloud/hcloud", configuration_aliases = [hcloud.a, hcloud.b] }
  }
}`},
		modules:   map[string]string{"net": "net"},
		providers: hcloud,
		notShared: hcloudAddr + ": configuration aliases in net",
	}, {
		name: "provider blocks in the root and a module",
		files: map[string]string{"main.tf": hcloudRequired + `provider "hcloud" {}` + "\n" + `module "net" { source = "./net" }`,
			"net/main.tf": hcloudRequired + `provider "hcloud" {}`},
		modules:   map[string]string{"net": "net"},
		providers: hcloud,
		notShared: hcloudAddr + ": provider blocks in several modules",
	}, {
		name: "a provider block only in a module",
		files: map[string]string{"main.tf": hcloudRequired + `module "net" { source = "./net" }`,
			"net/main.tf": hcloudRequired + `provider "hcloud" {}`},
		modules:   map[string]string{"net": "net"},
		providers: hcloud,
		shared:    []string{hcloudAddr},
	}, {
		name: "the same local name for another provider in a module",
		files: map[string]string{"main.tf": hcloudRequired + `provider "hcloud" {}` + "\n" + `module "net" { source = "./net" }`,
			"net/main.tf": `terraform {
  required_providers {
    hcloud = { source = "example.com/acme/hcloud" }
  }
}
provider "hcloud" {}`},
		modules: map[string]string{"net": "net"},
		providers: map[string][]string{
			"registry.opentofu.org/hetznercloud/hcloud/1.58.0": {"terraform-provider-hcloud_v1.58.0"},
			"example.com/acme/hcloud/2.0.0":                    {"terraform-provider-hcloud"},
		},
		shared: []string{"example.com/acme/hcloud", hcloudAddr},
	}, {
		name:  "a source with the registry's host",
		files: map[string]string{"main.tf": strings.Replace(hcloudRequired, `"hetznercloud/hcloud"`, `"registry.terraform.io/hetznercloud/hcloud"`, 1)},
		providers: map[string][]string{
			"registry.terraform.io/hetznercloud/hcloud/1.58.0": {"terraform-provider-hcloud_v1.58.0"},
		},
		shared: []string{"registry.terraform.io/hetznercloud/hcloud"},
	}, {
		name:  "two versions installed",
		files: map[string]string{"main.tf": hcloudRequired},
		providers: map[string][]string{
			"registry.opentofu.org/hetznercloud/hcloud/1.57.0": {"terraform-provider-hcloud_v1.57.0"},
			"registry.opentofu.org/hetznercloud/hcloud/1.58.0": {"terraform-provider-hcloud_v1.58.0"},
		},
		notShared: hcloudAddr + ": several versions installed (1.57.0, 1.58.0)",
	}, {
		name:      "no executable",
		files:     map[string]string{"main.tf": hcloudRequired},
		providers: map[string][]string{"registry.opentofu.org/hetznercloud/hcloud/1.58.0": {"terraform-provider-hcloud.txt"}},
		notShared: hcloudAddr + ": 0 executables named terraform-provider-hcloud in",
	}, {
		name:  "no providers (terraform_data only)",
		files: map[string]string{"main.tf": `resource "terraform_data" "x" {}`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := workDir(t, tc.files, tc.modules, tc.providers)
			shared, notShared, err := shareableProviders(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for addr, p := range shared {
				got = append(got, addr)
				if !strings.HasPrefix(p.binary, filepath.Join(dir, dataDir, "providers")) || !strings.Contains(filepath.Base(p.binary), "terraform-provider-") {
					t.Errorf("%s: binary %s", addr, p.binary)
				}
			}
			slices.Sort(got)
			if fmt.Sprint(got) != fmt.Sprint(tc.shared) {
				t.Errorf("shared %v, want %v", got, tc.shared)
			}
			switch {
			case tc.notShared == "" && len(notShared) > 0:
				t.Errorf("not shared: %v", notShared)
			case tc.notShared != "" && (len(notShared) != 1 || !strings.HasPrefix(notShared[0], tc.notShared)):
				t.Errorf("not shared: %q, want %q", notShared, tc.notShared)
			}
		})
	}

	t.Run("a broken module is an error", func(t *testing.T) {
		dir := workDir(t, map[string]string{"main.tf": hcloudRequired + `provider "hcloud" {`}, nil, hcloud)
		if _, _, err := shareableProviders(dir); err == nil {
			t.Error("no error")
		}
	})
}

func TestParseHandshake(t *testing.T) {
	for _, tc := range []struct {
		line    string
		want    tfexec.ReattachConfig
		wantErr string
	}{
		{line: "1|6|unix|/tmp/plugin123|grpc|\n", want: tfexec.ReattachConfig{Protocol: "grpc", ProtocolVersion: 6, Pid: 42, Test: true,
			Addr: tfexec.ReattachConfigAddr{Network: "unix", String: "/tmp/plugin123"}}},
		{line: "1|5|tcp|127.0.0.1:10000|grpc", want: tfexec.ReattachConfig{Protocol: "grpc", ProtocolVersion: 5, Pid: 42, Test: true,
			Addr: tfexec.ReattachConfigAddr{Network: "tcp", String: "127.0.0.1:10000"}}},
		{line: "1|6|unix|/tmp/p|grpc||true", want: tfexec.ReattachConfig{Protocol: "grpc", ProtocolVersion: 6, Pid: 42, Test: true,
			Addr: tfexec.ReattachConfigAddr{Network: "unix", String: "/tmp/p"}}},
		{line: "1|6|unix|/tmp/p|grpc|MIIBcert", wantErr: "requires TLS"},
		{line: "1|6|unix|/tmp/p|netrpc|", wantErr: `protocol "netrpc"`},
		{line: "2|6|unix|/tmp/p|grpc|", wantErr: "core protocol 2"},
		{line: "1|4|unix|/tmp/p|grpc|", wantErr: `version "4"`},
		{line: "1|6|pipe|/tmp/p|grpc|", wantErr: `network "pipe"`},
		{line: "This binary is a plugin. These are not meant to be executed directly.", wantErr: "not a plugin handshake"},
		{line: "", wantErr: "not a plugin handshake"},
	} {
		got, err := parseHandshake(tc.line, 42)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one with %q", tc.line, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case tc.wantErr == "" && got != tc.want:
			t.Errorf("%q: %+v, want %+v", tc.line, got, tc.want)
		}
	}
}

// fakeProvider writes a provider plugin that runs script (sh), into a working directory
// with hcloud's layout.
func fakeProvider(t *testing.T, script string) (dir string, p installedProvider) {
	t.Helper()
	dir = workDir(t, map[string]string{"main.tf": hcloudRequired}, nil,
		map[string][]string{"registry.opentofu.org/hetznercloud/hcloud/1.58.0": {"terraform-provider-hcloud_v1.58.0"}})
	shared, _, err := shareableProviders(dir)
	if err != nil || len(shared) != 1 {
		t.Fatalf("shareable: %v %v", shared, err)
	}
	p = shared["registry.opentofu.org/hetznercloud/hcloud"]
	if err := os.WriteFile(p.binary, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, p
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestStartProvider(t *testing.T) {
	ctx := context.Background()

	t.Run("handshake, logs, stop", func(t *testing.T) {
		// As a plugin: checks tofu's cookie, logs like go-plugin (a JSON line, dropped) and
		// like a crashing provider (plain text, kept), announces its socket, then serves.
		// (What it writes before it is killed reaches the log: stop drains its stderr.)
		dir, p := fakeProvider(t, `
[ "$TF_PLUGIN_MAGIC_COOKIE" = d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2 ] || exit 3
[ "$PLUGIN_PROTOCOL_VERSIONS" = 5,6 ] || exit 4
[ "$HCLOUD_TOKEN" = from-the-run ] || exit 5
[ "$(pwd)" = "$MODULE" ] || exit 6
echo '{"@level":"debug","@message":"plugin address"}' >&2
echo "panic: something the provider says" >&2
echo "1|6|unix|$PWD/plugin.sock|grpc|"
exec sleep 60
`)
		var log strings.Builder
		out := newRunLog(&log, nil)
		procs := startRunProviders(ctx, dir, map[string]string{"HCLOUD_TOKEN": "from-the-run", "MODULE": dir, "PATH": os.Getenv("PATH")}, out)
		if len(procs) != 1 {
			t.Fatalf("started %d providers; log:\n%s", len(procs), log.String())
		}
		proc := procs[0]
		want := tfexec.ReattachConfig{Protocol: "grpc", ProtocolVersion: 6, Pid: proc.cmd.Process.Pid, Test: true,
			Addr: tfexec.ReattachConfigAddr{Network: "unix", String: filepath.Join(dir, "plugin.sock")}}
		if proc.config != want || proc.addr != p.addr {
			t.Errorf("provider %s %+v, want %+v", proc.addr, proc.config, want)
		}
		if r := procs.reattach(); r == nil {
			t.Error("no reattach option")
		}
		if !alive(proc.config.Pid) {
			t.Error("the provider is not running")
		}
		procs.stop()
		if alive(proc.config.Pid) {
			t.Error("the provider still runs after stop")
		}
		text := log.String()
		for _, w := range []string{
			fmt.Sprintf("one process for the run of each provider: registry.opentofu.org/hetznercloud/hcloud (pid %d)", want.Pid),
			`"@module":"provider.stderr"`, "registry.opentofu.org/hetznercloud/hcloud: panic: something the provider says",
		} {
			if !strings.Contains(text, w) {
				t.Errorf("the log lacks %q:\n%s", w, text)
			}
		}
		if strings.Contains(text, "plugin address") {
			t.Errorf("go-plugin's own log line reached the run log:\n%s", text)
		}
	})

	t.Run("a provider that exits: tofu starts them", func(t *testing.T) {
		dir, _ := fakeProvider(t, "echo 'cannot start: no such thing' >&2\nexit 1\n")
		var log strings.Builder
		procs := startRunProviders(ctx, dir, map[string]string{"PATH": os.Getenv("PATH")}, newRunLog(&log, nil))
		if len(procs) != 0 || procs.reattach() != nil {
			t.Errorf("started %d providers", len(procs))
		}
		if !strings.Contains(log.String(), "tofu starts the providers itself: starting registry.opentofu.org/hetznercloud/hcloud") ||
			!strings.Contains(log.String(), "cannot start: no such thing") {
			t.Errorf("the log does not say why:\n%s", log.String())
		}
	})

	t.Run("no handshake before the run is cancelled", func(t *testing.T) {
		dir, p := fakeProvider(t, "echo $$ > pid\nexec sleep 60\n")
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := startProvider(ctx, p, dir, map[string]string{"PATH": os.Getenv("PATH")}, newRunLog(&strings.Builder{}, nil))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v", err)
		}
		pid, _ := os.ReadFile(filepath.Join(dir, "pid"))
		var n int
		if _, err := fmt.Sscan(string(pid), &n); err != nil || alive(n) {
			t.Errorf("the provider (pid %q) still runs: %v", pid, err)
		}
	})

	t.Run("nothing to share", func(t *testing.T) {
		dir := workDir(t, map[string]string{"main.tf": hcloudRequired + `provider "hcloud" { alias = "a" }`}, nil,
			map[string][]string{"registry.opentofu.org/hetznercloud/hcloud/1.58.0": {"terraform-provider-hcloud_v1.58.0"}})
		var log strings.Builder
		if procs := startRunProviders(ctx, dir, nil, newRunLog(&log, nil)); len(procs) != 0 {
			t.Errorf("started %d providers", len(procs))
		}
		if !strings.Contains(log.String(), "tofu starts these providers itself, once per step: registry.opentofu.org/hetznercloud/hcloud: alias hcloud.a") {
			t.Errorf("the log does not say why:\n%s", log.String())
		}
	})
}
