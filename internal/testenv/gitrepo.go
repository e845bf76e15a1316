// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitRepo is a bare git repository of modules made with the real git, for module sources
// fetched over file:// (Bare) and HTTP (Serve).
type GitRepo struct {
	t testing.TB
	// Bare is the bare repository's folder: git::file://<Bare>//<path>?ref=<tag>.
	Bare string
	work string
}

// NewGitRepo makes an empty repository whose branch is main. git must be installed.
func NewGitRepo(t testing.TB) *GitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed for git module sources:", err)
	}
	dir := t.TempDir()
	r := &GitRepo{t: t, Bare: filepath.Join(dir, "modules.git"), work: filepath.Join(dir, "work")}
	r.git(dir, "init", "-q", "--bare", "--initial-branch=main", r.Bare)
	r.git(dir, "clone", "-q", r.Bare, r.work)
	return r
}

func (r *GitRepo) git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit puts the files of the folder src (hidden ones left out) at path in the repository,
// commits, tags the commit (moving the tag if it exists) and pushes; it returns the commit.
func (r *GitRepo) Commit(src, path, tag string) string {
	r.t.Helper()
	dst := filepath.Join(r.work, path)
	if err := os.RemoveAll(dst); err != nil {
		r.t.Fatal(err)
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return r.commitWork(tag)
}

// WriteFile writes one file at path in the repository, commits, tags and pushes like Commit.
func (r *GitRepo) WriteFile(path, content, tag string) string {
	r.t.Helper()
	file := filepath.Join(r.work, path)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return r.commitWork(tag)
}

func (r *GitRepo) commitWork(tag string) string {
	r.t.Helper()
	r.git(r.work, "add", "-A")
	r.git(r.work, "commit", "--allow-empty", "-q", "-m", "modules at "+tag)
	r.git(r.work, "tag", "-f", tag)
	r.git(r.work, "push", "-q", "-f", "origin", "main", "refs/tags/"+tag)
	r.git(r.Bare, "update-server-info") // for git's HTTP protocol served as plain files
	return r.git(r.work, "rev-parse", "HEAD")
}

// Serve serves the repository over git's HTTP protocol on loopback, as plain files (the
// protocol any file server speaks), until the test ends; it returns the repository's URL.
func (r *GitRepo) Serve() string {
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(r.Bare))))
	r.t.Cleanup(srv.Close)
	return srv.URL + "/" + filepath.Base(r.Bare)
}
