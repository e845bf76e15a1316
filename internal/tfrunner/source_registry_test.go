// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

func TestIsRegistrySource(t *testing.T) {
	for source, want := range map[string]bool{
		"hashicorp/consul/aws":                         true,
		"registry.example.com/org/node/hcloud":         true,
		"127.0.0.1:8443/org/node/hcloud":               true,
		"registry.example.com/org/node/hcloud//sub/x":  true,
		"localhost:8443/org/node/hcloud":               false, // a host needs a dot
		"github.com/org/repo":                          false,
		"github.com/org/repo/sub":                      false, // reserved for repositories
		"example.com/org/node":                         false, // a namespace has no dot
		"registry.example.com/org/node/hcloud?ref=v1":  false,
		"registry.example.com/org/node/HCloud":         false,
		"git::https://example.com/org/node.git?ref=v1": false,
		"oci://registry.example.com/org/node?tag=v1":   false,
		"https://example.com/node.tar.gz":              false,
		"/modules/node":                                false,
		"org/node":                                     false,
	} {
		if got := IsRegistrySource(source); got != want {
			t.Errorf("IsRegistrySource(%q) = %v, want %v", source, got, want)
		}
	}
}

// A registry source with a version constraint: tofu resolves the constraint to the highest
// release that matches, the resolution records it, and the source with that exact version
// fetches that release again after a newer one is published. The token reaches the
// registry through TF_TOKEN_<host>.
func TestFetchModuleRegistry(t *testing.T) {
	reg := testenv.NewModuleRegistry(t, "registry-token")
	node, other := moduleDir(t, "node"), moduleDir(t, "required-zone")
	reg.Publish(node, "org/node/sim", "1.0.0")
	reg.Publish(other, "org/node/sim", "1.3.0")
	reg.Publish(node, "org/node/sim", "2.0.0")
	env := registryEnv(t, reg, "registry-token")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	source := reg.Source("org/node/sim")

	got, err := FetchModule(ctx, tofuPath(t), source, ">= 1.0, < 2", t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ModuleDigest(other)
	if got.Version != "1.3.0" || got.Digest != want || got.Pinned != source || got.Commit != "" {
		t.Errorf("the constraint resolved to %+v, want version 1.3.0 of %s with digest %s", got, source, want)
	}
	if _, err := os.Stat(filepath.Join(got.Dir, "main.tf")); err != nil {
		t.Errorf("the fetched folder %s holds no module: %v", got.Dir, err)
	}
	for _, q := range reg.Requests("/v1/modules/") {
		if !q.Authorized {
			t.Errorf("request %s reached the registry without its token", q.Path)
		}
	}
	if len(reg.Requests("/v1/modules/org/node/sim/1.3.0/download")) != 1 {
		t.Errorf("the registry was not asked for version 1.3.0's download: %+v", reg.Requests("/"))
	}

	// A newer matching release: the constraint takes it, the pinned version does not.
	reg.Publish(node, "org/node/sim", "1.4.0")
	again, err := FetchModule(ctx, tofuPath(t), got.Pinned, got.Version, t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	if again.Version != "1.3.0" || again.Digest != got.Digest {
		t.Errorf("the pinned version fetched %s (%s), want 1.3.0 (%s)", again.Version, again.Digest, got.Digest)
	}
	newer, err := FetchModule(ctx, tofuPath(t), source, ">= 1.0, < 2", t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	if newest, _ := ModuleDigest(node); newer.Version != "1.4.0" || newer.Digest != newest {
		t.Errorf("after 1.4.0 was published the constraint resolved to %s (%s), want 1.4.0", newer.Version, newer.Digest)
	}
}

func TestFetchModuleRegistryFailures(t *testing.T) {
	reg := testenv.NewModuleRegistry(t, "registry-token")
	reg.Publish(moduleDir(t, "node"), "org/node/sim", "1.0.0")
	env := registryEnv(t, reg, "registry-token")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	source := reg.Source("org/node/sim")

	_, err := FetchModule(ctx, tofuPath(t), source, ">= 2", t.TempDir(), env)
	t.Log(err)
	if !errors.Is(err, ErrModuleFetch) || !strings.Contains(err.Error(), "(version >= 2)") || !strings.Contains(err.Error(), "no available version") {
		t.Errorf("a constraint matching no release gave %v, want ErrModuleFetch naming the constraint", err)
	}

	noToken := fetchEnv(t)
	noToken["SSL_CERT_FILE"] = reg.CAFile
	if _, err := FetchModule(ctx, tofuPath(t), source, "1.0.0", t.TempDir(), noToken); !errors.Is(err, ErrModuleFetch) || !strings.Contains(err.Error(), "401") {
		t.Errorf("a fetch without the token gave %v, want ErrModuleFetch saying 401", err)
	}

	// A registry that does not answer: a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	_ = l.Close()
	_, err = FetchModule(ctx, tofuPath(t), gone+"/org/node/sim", "1.0.0", t.TempDir(), env)
	t.Log(err)
	if !errors.Is(err, ErrModuleFetch) || !strings.Contains(err.Error(), gone) {
		t.Errorf("an unreachable registry gave %v, want ErrModuleFetch naming its host", err)
	}

	for _, tc := range []struct{ source, version, says string }{
		{"git::https://example.com/org/node.git?ref=v1", "1.0.0", "only a module registry source"},
		{"oci://example.com/org/node?tag=v1", ">= 1", "only a module registry source"},
		{source, "one point two", "not a version constraint"},
	} {
		if _, err := FetchModule(ctx, tofuPath(t), tc.source, tc.version, t.TempDir(), env); !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("source %s version %q gave %v, want ErrInvalidModule saying %q", tc.source, tc.version, err, tc.says)
		}
	}
}

// A run of a registry source with the version its claim recorded fetches that release, and
// says so in its log, also once a newer one is published.
func TestRunRegistrySourcePinnedVersion(t *testing.T) {
	reg := testenv.NewModuleRegistry(t, "registry-token")
	reg.Publish(moduleDir(t, "node"), "org/node/sim", "1.0.0")
	reg.Publish(moduleDir(t, "required-zone"), "org/node/sim", "1.1.0")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	state, record := filepath.Join(tmp, "state.tfstate"), filepath.Join(tmp, "record")
	if err := os.Mkdir(record, 0o700); err != nil {
		t.Fatal(err)
	}
	want, _ := ModuleDigest(moduleDir(t, "node"))
	req := nodeRequest(t, "node-registry", "node", state, map[string]string{"record_dir": record})
	req.ModuleDir, req.ModuleSource, req.ModuleVersion, req.ModuleDigest = "", reg.Source("org/node/sim"), "1.0.0", want
	req.Env = map[string]string{"SSL_CERT_FILE": reg.CAFile, reg.TokenEnv(): "registry-token"}
	var log testenv.SyncBuffer
	if res := Run(ctx, req, &log, testRules); !res.Succeeded {
		t.Fatalf("apply of %s version 1.0.0 failed: %+v\n%s", req.ModuleSource, res.Error, log.String())
	}
	if !strings.Contains(log.String(), "fetched module "+want+" version 1.0.0") {
		t.Errorf("the log does not say which version was fetched:\n%s", log.String())
	}
	destroy := req
	destroy.WorkDir, destroy.Operation = t.TempDir(), Destroy
	if res := Run(ctx, destroy, io.Discard, testRules); !res.Succeeded {
		t.Fatalf("destroy failed: %+v", res.Error)
	}
	if _, err := os.Stat(filepath.Join(record, "destroyed")); err != nil {
		t.Errorf("the machine was not destroyed: %v", err)
	}

	bad := req
	bad.WorkDir, bad.ModuleSource = t.TempDir(), "git::https://example.com/org/node.git?ref=v1"
	if res := Run(ctx, bad, io.Discard, testRules); res.Succeeded || !strings.Contains(res.Error.Message, "only a module registry source") {
		t.Errorf("a version on a git source gave %+v, want the request refused", res.Error)
	}
}

// registryEnv is a fetch's environment that trusts reg's certificate and gives tofu its token.
func registryEnv(t *testing.T, reg *testenv.ModuleRegistry, token string) map[string]string {
	env := fetchEnv(t)
	env["SSL_CERT_FILE"] = reg.CAFile
	env[reg.TokenEnv()] = token
	return env
}
