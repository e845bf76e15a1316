// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

func fetchEnv(t *testing.T) map[string]string {
	env, err := runEnv(Request{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestFetchModuleLocal(t *testing.T) {
	dir := moduleDir(t, "node")
	got, err := FetchModule(context.Background(), tofuPath(t), dir, "", t.TempDir(), fetchEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ModuleDigest(dir)
	if got.Dir != dir || got.Pinned != dir || got.Commit != "" || got.Digest != want || !strings.HasPrefix(want, "sha256:") {
		t.Errorf("local source resolved to %+v, want its own folder with digest %s", got, want)
	}
}

func TestFetchModuleGit(t *testing.T) {
	repo := testenv.NewGitRepo(t)
	first := repo.Commit(moduleDir(t, "node"), "node", "v1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct{ name, source string }{
		{"file", "git::file://" + repo.Bare + "//node?ref=v1"},
		{"http", "git::" + repo.Serve() + "//node?ref=v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FetchModule(ctx, tofuPath(t), tc.source, "", t.TempDir(), fetchEnv(t))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ModuleDigest(moduleDir(t, "node"))
			if got.Commit != first || got.Digest != want {
				t.Errorf("fetched commit %s digest %s, want %s and the module's %s", got.Commit, got.Digest, first, want)
			}
			if !strings.Contains(got.Pinned, "ref="+first) || strings.Contains(got.Pinned, "ref=v1") {
				t.Errorf("pinned source %s does not name the commit", got.Pinned)
			}
			if _, err := os.Stat(filepath.Join(got.Dir, "main.tf")); err != nil {
				t.Errorf("the fetched folder %s holds no module: %v", got.Dir, err)
			}
		})
	}

	// The tag moves to other content: the source resolves anew, the pinned one does not.
	source := "git::file://" + repo.Bare + "//node?ref=v1"
	pinned, err := FetchModule(ctx, tofuPath(t), source, "", t.TempDir(), fetchEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	second := repo.Commit(moduleDir(t, "required-zone"), "node", "v1")
	moved, err := FetchModule(ctx, tofuPath(t), source, "", t.TempDir(), fetchEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	if moved.Commit != second || moved.Digest == pinned.Digest {
		t.Errorf("after the tag moved the source resolved to %s (%s), want %s with other content", moved.Commit, moved.Digest, second)
	}
	again, err := FetchModule(ctx, tofuPath(t), pinned.Pinned, "", t.TempDir(), fetchEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	if again.Commit != first || again.Digest != pinned.Digest {
		t.Errorf("the pinned source %s fetched %s (%s), want %s (%s)", pinned.Pinned, again.Commit, again.Digest, first, pinned.Digest)
	}
}

func TestFetchModuleFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	missing := "git::file://" + filepath.Join(t.TempDir(), "none.git") + "?ref=v1"
	if _, err := FetchModule(ctx, tofuPath(t), missing, "", t.TempDir(), fetchEnv(t)); !errors.Is(err, ErrModuleFetch) || !strings.Contains(err.Error(), "none.git") {
		t.Errorf("a missing repository gave %v, want ErrModuleFetch naming it", err)
	}
	for _, source := range []string{"./relative", "git::https://example.com/x.git?ref=${var.x}", " git::https://example.com/x.git"} {
		if _, err := FetchModule(ctx, tofuPath(t), source, "", t.TempDir(), fetchEnv(t)); !errors.Is(err, ErrInvalidModule) {
			t.Errorf("source %q gave %v, want ErrInvalidModule", source, err)
		}
	}
}

// Without a git program on the run's PATH (the image has none), a git source fails before
// tofu starts, with what to do instead; a source of another kind does not need git.
func TestFetchModuleGitWithoutGit(t *testing.T) {
	repo := testenv.NewGitRepo(t)
	repo.Commit(moduleDir(t, "node"), "node", "v1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	noGit := t.TempDir()
	// A file named git that cannot be run is no git program.
	if err := os.WriteFile(filepath.Join(noGit, "git"), []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := fetchEnv(t)
	env["PATH"] = noGit
	for _, source := range []string{
		"git::file://" + repo.Bare + "//node?ref=v1",
		"github.com/example/node",
		"git@github.com:example/node.git",
	} {
		dir := filepath.Join(t.TempDir(), "fetch")
		_, err := FetchModule(ctx, tofuPath(t), source, "", dir, env)
		if !errors.Is(err, ErrModuleFetch) || !strings.Contains(err.Error(), "no git is on the PATH ("+noGit+")") ||
			!strings.Contains(err.Error(), "use an OCI, module registry or HTTP(S) archive source") {
			t.Errorf("git source %s without git gave %v, want ErrModuleFetch saying git is missing and what to use", source, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("a refused git source left %s behind (%v)", dir, err)
		}
	}

	if _, err := FetchModule(ctx, tofuPath(t), serveModuleArchive(t)+"/node.tar.gz", "", t.TempDir(), env); err != nil {
		t.Errorf("an HTTP archive source without git: %v, want it fetched", err)
	}
}

func TestIsGitSource(t *testing.T) {
	for source, want := range map[string]bool{
		"git::https://example.com/org/node.git?ref=v1": true,
		"git::ssh://git@example.com/org/node.git":      true,
		"github.com/org/node":                          true,
		"git@github.com:org/node.git":                  true,
		"https://example.com/node.tar.gz":              false,
		"oci://registry.example.com/org/node":          false,
		"registry.example.com/org/node/hcloud":         false,
		"/modules/hetzner-cloud":                       false,
	} {
		if got := IsGitSource(source); got != want {
			t.Errorf("IsGitSource(%q) = %v, want %v", source, got, want)
		}
	}
}

// A run of a git source fetches it itself; a recorded digest holds the apply to that content,
// and a destroy of other content goes on.
func TestRunGitSourcePinnedByDigest(t *testing.T) {
	repo := testenv.NewGitRepo(t)
	repo.Commit(moduleDir(t, "node"), "node", "v1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resolved, err := FetchModule(ctx, tofuPath(t), "git::"+repo.Serve()+"//node?ref=v1", "", t.TempDir(), fetchEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	state, record := filepath.Join(tmp, "state.tfstate"), filepath.Join(tmp, "record")
	if err := os.Mkdir(record, 0o700); err != nil {
		t.Fatal(err)
	}
	req := nodeRequest(t, "node-git", "node", state, map[string]string{"record_dir": record})
	req.ModuleDir, req.ModuleSource, req.ModuleDigest = "", resolved.Pinned, resolved.Digest
	var log testenv.SyncBuffer
	if res := Run(ctx, req, &log, testRules); !res.Succeeded {
		t.Fatalf("apply of %s failed: %+v\n%s", req.ModuleSource, res.Error, log.String())
	}
	if !strings.Contains(log.String(), "fetched module "+resolved.Digest+" at commit "+resolved.Commit) {
		t.Errorf("the log does not say what was fetched:\n%s", log.String())
	}

	// Another apply with a digest the content does not have fails before tofu runs.
	other := req
	other.WorkDir, other.ModuleDigest = t.TempDir(), "sha256:0000"
	if res := Run(ctx, other, io.Discard, testRules); res.Succeeded || res.Error.Class != InvalidModule || !strings.Contains(res.Error.Message, "which the claim was created with") {
		t.Errorf("an apply of other content gave %+v, want InvalidModule", res.Error)
	}

	// The destroy of the same mismatch says so and removes the machine.
	destroy := other
	destroy.WorkDir, destroy.Operation = t.TempDir(), Destroy
	var dlog testenv.SyncBuffer
	if res := Run(ctx, destroy, &dlog, testRules); !res.Succeeded {
		t.Fatalf("destroy failed: %+v\n%s", res.Error, dlog.String())
	}
	if !strings.Contains(dlog.String(), "destroying with it") {
		t.Errorf("the destroy's log does not report the other content:\n%s", dlog.String())
	}
	if _, err := os.Stat(filepath.Join(record, "destroyed")); err != nil {
		t.Errorf("the machine was not destroyed: %v", err)
	}
}

// A module in a subdirectory of a git repository (//node) may call a module of another of
// its folders (source = "../shared"), as tofu allows: the run has the whole package.
func TestRunGitSubdirUsesItsPackage(t *testing.T) {
	module := t.TempDir()
	if err := copyTree(moduleDir(t, "node"), module); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(module, "shared.tf"), "module \"shared\" {\n  source = \"../shared\"\n}\n\noutput \"shared\" {\n  value = module.shared.greeting\n}\n")
	shared := t.TempDir()
	writeTestFile(t, filepath.Join(shared, "main.tf"), "output \"greeting\" {\n  value = \"from the package\"\n}\n")
	repo := testenv.NewGitRepo(t)
	repo.Commit(shared, "shared", "v1")
	repo.Commit(module, "node", "v1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	state, record := filepath.Join(tmp, "state.tfstate"), filepath.Join(tmp, "record")
	if err := os.Mkdir(record, 0o700); err != nil {
		t.Fatal(err)
	}
	req := nodeRequest(t, "node-subdir", "node", state, map[string]string{"record_dir": record})
	req.ModuleDir, req.ModuleSource = "", "git::file://"+repo.Bare+"//node?ref=v1"
	var log testenv.SyncBuffer
	res := Run(ctx, req, &log, testRules)
	if !res.Succeeded {
		t.Fatalf("apply of %s failed: %+v\n%s", req.ModuleSource, res.Error, log.String())
	}
	if got := string(res.Outputs["shared"]); got != `"from the package"` {
		t.Errorf("output shared is %s, want the sibling module's", got)
	}
	destroy := req
	destroy.WorkDir, destroy.Operation = t.TempDir(), Destroy
	if res := Run(ctx, destroy, io.Discard, testRules); !res.Succeeded {
		t.Fatalf("destroy failed: %+v", res.Error)
	}
	if _, err := os.Stat(filepath.Join(record, "destroyed")); err != nil {
		t.Errorf("the machine was not destroyed: %v", err)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// An HTTP archive is fetched and unpacked by tofu; its digest is its files'.
// serveModuleArchive serves the test module "node" as node.tar.gz at the URL it returns.
func serveModuleArchive(t *testing.T) string {
	archive := filepath.Join(t.TempDir(), "node.tar.gz")
	tar := exec.Command("tar", "-czf", archive, "-C", moduleDir(t, "node"), ".")
	if out, err := tar.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(archive))))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestFetchModuleHTTPArchive(t *testing.T) {
	url := serveModuleArchive(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := FetchModule(ctx, tofuPath(t), url+"/node.tar.gz", "", t.TempDir(), fetchEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ModuleDigest(moduleDir(t, "node"))
	if got.Digest != want || got.Commit != "" || got.Pinned != url+"/node.tar.gz" {
		t.Errorf("the archive resolved to %+v, want the module's digest %s", got, want)
	}
	if _, err := FetchModule(ctx, tofuPath(t), url+"/missing.tar.gz", "", t.TempDir(), fetchEnv(t)); !errors.Is(err, ErrModuleFetch) {
		t.Errorf("a missing archive gave %v, want ErrModuleFetch", err)
	}
}
