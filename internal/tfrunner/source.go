// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// A module source is what a class names its module by: an absolute path (a folder on the
// runner's machine, e.g. in its image) or any remote source address OpenTofu accepts in a
// module block (git::https://host/repo.git//subdir?ref=v1.2.0, git::ssh://..., an HTTP(S)
// archive, a module registry address host[:port]/namespace/name/system with a version
// constraint, ...). Remote sources are fetched by tofu itself: FetchModule writes a root
// module that calls the source (`module "node" { source = ..., version = ... }`) and runs
// `tofu get`, so every source tofu knows works as tofu documents it, with the credentials of
// the run's environment (GIT_SSH_COMMAND, a git credential helper's settings,
// TF_TOKEN_<host>, ...).

// fetchCallName is the module call of the root module FetchModule writes.
const fetchCallName = "node"

// IsLocalSource reports whether a module source names a folder on this machine (an absolute
// path), which is read in place rather than fetched.
func IsLocalSource(source string) bool {
	return filepath.IsAbs(source)
}

// ResolvedModule is a module source as one fetch found it.
type ResolvedModule struct {
	// Source is the source as given.
	Source string `json:"source"`
	// Pinned is the source that fetches this same content again: a git source's ref
	// replaced by the commit it resolved to; the source itself for the others (a registry
	// source with Version as its version).
	Pinned string `json:"pinned"`
	// Commit is the git commit a git source resolved to.
	Commit string `json:"commit,omitempty"`
	// Version is the exact version tofu installed of a registry source (from its version
	// constraint): Pinned fetched with this version fetches this same release again.
	Version string `json:"version,omitempty"`
	// Digest identifies the module's content (ModuleDigest).
	Digest string `json:"digest"`
	// Dir is the module's folder on this machine: the source for a local one, else inside
	// the folder FetchModule was given.
	Dir string `json:"-"`
	// Package is the folder of the whole package tofu fetched, of which Dir is the module's
	// subdirectory (a source's //subdir); Dir itself when the source names none, and for a
	// local one. A module may refer to its package's other folders (source = "../shared"),
	// so a run works in a copy of the package.
	Package string `json:"-"`
}

// ErrModuleFetch marks a module source that could not be fetched.
var ErrModuleFetch = errors.New("the module cannot be fetched")

// ModuleDigest identifies the content of the module in dir: "sha256:" and the hash of its
// files' names, contents and executable bits, the files a run copies (hidden files, state
// and variable files left out).
func ModuleDigest(dir string) (string, error) {
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return "", fmt.Errorf("%w: module folder %s cannot be read", ErrInvalidModule, dir)
	}
	h := sha256.New()
	if err := hashTree(h, dir, ""); err != nil {
		return "", fmt.Errorf("reading module %s: %w", dir, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// FetchModule resolves a module source. A local source is read where it is. A remote one is
// fetched by `tofu get` into dir (a folder the caller owns and removes; it must be empty or
// absent) with the environment env, which is tofu's whole environment; errors wrap
// ErrModuleFetch with tofu's own words, or ErrInvalidModule for a source tofu cannot use.
// version is a registry source's version constraint (">= 1.2, < 2", "1.2.3"; empty: the
// newest release), the module call's version argument; a remote source of another kind
// takes none (ErrInvalidModule), and a local one ignores it.
func FetchModule(ctx context.Context, tofuPath, source, version, dir string, env map[string]string) (*ResolvedModule, error) {
	if IsLocalSource(source) {
		digest, err := ModuleDigest(source)
		if err != nil {
			return nil, err
		}
		return &ResolvedModule{Source: source, Pinned: source, Digest: digest, Dir: source, Package: source}, nil
	}
	if err := checkRemoteSource(source); err != nil {
		return nil, err
	}
	if err := CheckModuleVersion(source, version); err != nil {
		return nil, err
	}
	if err := checkGitProgram(source, env["PATH"]); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	call := map[string]string{"source": source}
	if version != "" {
		call["version"] = version
	}
	// One argument a line, so that a diagnostic of tofu's quotes the argument it is about.
	root, err := json.MarshalIndent(map[string]any{"module": map[string]any{fetchCallName: call}}, "", " ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf.json"), root, 0o600); err != nil {
		return nil, fmt.Errorf("writing the fetch's root module: %w", err)
	}
	tf, err := tfexec.NewTerraform(dir, tofuPath)
	if err != nil {
		return nil, fmt.Errorf("using tofu at %s: %w", tofuPath, err)
	}
	if err := tf.SetEnv(env); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	var stderr strings.Builder
	tf.SetStderr(&stderr)
	if err := tf.Get(ctx); err != nil {
		why := strings.TrimSpace(stderr.String())
		if why == "" {
			why = err.Error()
		}
		what := source
		if version != "" {
			what += " (version " + version + ")"
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrModuleFetch, what, message.Short(why))
	}
	modDir, installed, err := fetchedDir(dir)
	if err != nil {
		return nil, err
	}
	digest, err := ModuleDigest(modDir)
	if err != nil {
		return nil, err
	}
	res := &ResolvedModule{Source: source, Pinned: source, Digest: digest, Dir: modDir, Package: modDir}
	if IsRegistrySource(source) {
		if installed == "" {
			return nil, fmt.Errorf("%w: tofu's module manifest records no version of registry module %s", ErrModuleFetch, source)
		}
		res.Version = installed
	}
	pkg := filepath.Join(dir, dataDir, "modules", fetchCallName)
	if rel, err := filepath.Rel(pkg, modDir); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
		res.Package = pkg
	}
	if commit, ok := gitCommit(ctx, pkg, env); ok {
		res.Commit = commit
		res.Pinned = pinGitRef(source, commit)
	}
	return res, nil
}

// FetchRemoteModule fetches a remote source outside a run (a class's check, `fulfiller module
// check`) as a run would: into a new folder under parent, with the tofu named by tofu (found
// as LocateTofu finds it) and the environment a run's tofu would have (runEnv: a few of this
// process's variables, a home and a CLI configuration of its own, the TofuEnvPrefix
// variables), then extra (the class's credentials), which wins. It returns the resolution and
// the folder, which the caller removes once done with the module; on an error nothing is
// left behind.
func FetchRemoteModule(ctx context.Context, tofu, source, version, parent string, extra map[string]string) (*ResolvedModule, string, error) {
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, "", fmt.Errorf("creating %s: %w", parent, err)
	}
	work, err := os.MkdirTemp(parent, "fetch-")
	if err != nil {
		return nil, "", err
	}
	got, err := fetchRemoteModule(ctx, tofu, source, version, work, extra)
	if err != nil {
		_ = os.RemoveAll(work)
		return nil, "", err
	}
	return got, work, nil
}

func fetchRemoteModule(ctx context.Context, tofu, source, version, work string, extra map[string]string) (*ResolvedModule, error) {
	path, err := LocateTofu(ctx, tofu)
	if err != nil {
		return nil, err
	}
	env, err := runEnv(Request{WorkDir: filepath.Join(work, "run"), Env: extra})
	if err != nil {
		return nil, err
	}
	return FetchModule(ctx, path, source, version, filepath.Join(work, "root"), env)
}

// IsGitSource reports whether tofu fetches source with the git program: a git:: source, or
// one of the shorthands OpenTofu's module sources documentation names for git
// (github.com/org/repo over HTTPS, git@host:org/repo over SSH).
func IsGitSource(source string) bool {
	for _, prefix := range []string{"git::", "github.com/", "git@"} {
		if strings.HasPrefix(source, prefix) {
			return true
		}
	}
	return false
}

// checkGitProgram refuses a git source where tofu would find no git program on path (the
// run's PATH), before tofu is started, in words that say what to do: the image has no git
// (docs/image.md).
func checkGitProgram(source, path string) error {
	if !IsGitSource(source) {
		return nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		if info, err := os.Stat(filepath.Join(dir, "git")); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is a git source, which tofu fetches with the git program, and no git is on the PATH (%s): "+
		"the fulfiller image has none; use an OCI, module registry or HTTP(S) archive source, or run an image with git (docs/image.md)",
		ErrModuleFetch, source, path)
}

// checkRemoteSource refuses what cannot be a module block's literal source.
func checkRemoteSource(source string) error {
	switch {
	case strings.TrimSpace(source) != source || source == "":
		return fmt.Errorf("%w: module source %q has surrounding spaces or is empty", ErrInvalidModule, source)
	case strings.HasPrefix(source, "./") || strings.HasPrefix(source, "../"):
		return fmt.Errorf("%w: module source %q is a relative path; name a folder by its absolute path", ErrInvalidModule, source)
	case strings.Contains(source, "${") || strings.Contains(source, "%{"):
		return fmt.Errorf("%w: module source %q holds a template sequence", ErrInvalidModule, source)
	case strings.ContainsAny(source, "\n\r\t"):
		return fmt.Errorf("%w: module source %q holds a control character", ErrInvalidModule, source)
	}
	return nil
}

// fetchedDir is the folder `tofu get` installed the module call in and the version it
// installed (a registry module's; empty for the others), from its module manifest
// (.terraform/modules/modules.json, the record tofu, editors and linters read installed
// modules from).
func fetchedDir(dir string) (string, string, error) {
	data, err := os.ReadFile(filepath.Join(dir, dataDir, "modules", "modules.json"))
	if err != nil {
		return "", "", fmt.Errorf("%w: tofu get left no module manifest: %w", ErrModuleFetch, err)
	}
	var manifest struct {
		Modules []struct {
			Key     string `json:"Key"`
			Dir     string `json:"Dir"`
			Version string `json:"Version"`
		} `json:"Modules"`
	}
	if err := json.Unmarshal(data, &manifest); err != nil {
		return "", "", fmt.Errorf("%w: reading tofu's module manifest: %w", ErrModuleFetch, err)
	}
	for _, m := range manifest.Modules {
		if m.Key != fetchCallName {
			continue
		}
		d := filepath.FromSlash(m.Dir)
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		return d, m.Version, nil
	}
	return "", "", fmt.Errorf("%w: tofu's module manifest does not list the module", ErrModuleFetch)
}

// gitCommit is the commit checked out in pkg when tofu fetched a git source there.
func gitCommit(ctx context.Context, pkg string, env map[string]string) (string, bool) {
	if _, err := os.Stat(filepath.Join(pkg, ".git")); err != nil {
		return "", false
	}
	cmd := exec.CommandContext(ctx, "git", "-C", pkg, "rev-parse", "HEAD")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	commit := strings.TrimSpace(string(out))
	if err != nil || len(commit) < 40 {
		return "", false
	}
	return commit, true
}

// pinGitRef is a git source with its ref set to commit (a shallow clone's depth dropped: a
// commit is fetched by a full clone).
func pinGitRef(source, commit string) string {
	base, query, _ := strings.Cut(source, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return source
	}
	q.Set("ref", commit)
	q.Del("depth")
	return base + "?" + q.Encode()
}
