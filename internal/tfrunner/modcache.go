// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-exec/tfexec"
)

// The module cache (Request.CacheDir) lets the runs of one executor share what `tofu init`
// makes of a module, so that a run neither copies nor initialises an unchanged module:
//
//	modules/<key>/          the module as it was when first seen, the backend file, the
//	                        dependency lock file and .terraform/ with the installed modules and
//	                        providers: `tofu init -backend=false`, made once per key in a
//	                        temporary folder and renamed into place; never written after.
//	backends/<key>-<keys>.json
//	                        what `tofu init` recorded of its backend (.terraform/
//	                        terraform.tfstate) for one run, whose request gave -backend-config
//	                        values for the keys <keys>: later runs with the same keys write
//	                        their own copy with their values instead of running init.
//	tofu/<id>/tofu          a wrapper of one tofu binary that answers terraform-exec's version
//	                        probe (`tofu version -json`, once per run) from version.json, the
//	                        binary's own answer, and runs the binary for everything else.
//
// <key> is a hash of the module's content, the backend type, the tofu binary and the CLI
// configuration; <id> a hash of the binary's path, size and modification time.
//
// A run of a cached module works in a folder of its own (WorkDir/module) that links to the
// cached module's files and holds its own .terraform/: links to the shared modules and
// providers, and its own backend record and workspace selection. What tofu writes in the
// working directory (a replaced lock file, crash logs) lands in the run's folder. The
// backend record is tofu's own file with values replaced: it is only used when each
// -backend-config key holds a string in it and every other setting is unset, so the values
// of the run's request are the whole difference between two runs.
const (
	cacheModules  = "modules"
	cacheBackends = "backends"
	cacheTofu     = "tofu"
)

// Files tofu keeps in a working directory's data directory (.terraform/).
const (
	dataDir          = ".terraform"
	backendStateFile = "terraform.tfstate" // the backend record
	workspaceFile    = "environment"       // the selected workspace
)

// cacheable reports whether a request's runs can use the module cache: it is one of the
// runner's shortcuts, needs a cache folder, and a backend that keeps the state outside the
// working directory.
func cacheable(req Request) bool {
	return req.Shortcuts && req.CacheDir != "" && req.Backend.Type != "" && req.Backend.Type != "local"
}

// moduleKey identifies what `tofu init -backend=false` makes of a module: its files (those
// prepareModule copies, with whether each is executable), the backend type, the tofu binary
// and the CLI configuration. Other permission bits do not count: a copy gets them through
// the umask (a module checked out as 0664 is copied as 0644) and tofu does not read them.
func moduleKey(src string, backendType, tofuID string, cliConfig []byte) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "backend %q\ntofu %s\ncli %x\n", backendType, tofuID, sha256.Sum256(cliConfig))
	if info, err := os.Stat(src); err != nil || !info.IsDir() {
		return "", fmt.Errorf("%w: module folder %s cannot be read", ErrInvalidModule, src)
	}
	if err := hashTree(h, src, ""); err != nil {
		return "", fmt.Errorf("reading module %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func hashTree(h io.Writer, root, rel string) error {
	entries, err := os.ReadDir(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	for _, e := range entries { // sorted by name
		if skipModuleFile(e.Name()) {
			continue
		}
		path := filepath.Join(rel, e.Name())
		info, err := os.Stat(filepath.Join(root, path)) // follows symbolic links, as copyTree
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			fmt.Fprintf(h, "dir %q\n", path)
			err = hashTree(h, root, path)
		case info.Mode().IsRegular():
			data, rerr := os.ReadFile(filepath.Join(root, path))
			if rerr != nil {
				return rerr
			}
			fmt.Fprintf(h, "file %q executable=%t %d\n", path, info.Mode().Perm()&0o111 != 0, len(data))
			_, err = h.Write(data)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tofuID identifies a tofu binary by its resolved path, size and modification time.
func tofuID(path string) (string, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("using tofu at %s: %w", path, err)
	}
	info, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Errorf("using tofu at %s: %w", path, err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\n%d\n%d", resolved, info.Size(), info.ModTime().UnixNano()))
	return hex.EncodeToString(sum[:])[:16], nil
}

// publish makes a cache entry at path once: under an exclusive lock on path+".lock", unless
// path exists by then, fill fills a fresh temporary folder next to path, which is then
// renamed into place. It returns whether this call made the entry.
func publish(ctx context.Context, path string, fill func(tmp string) error) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	}
	unlock, err := lockPath(ctx, path+".lock")
	if err != nil {
		return false, err
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return false, nil // made while we waited
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return false, fmt.Errorf("creating cache entry: %w", err)
	}
	if err := fill(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.RemoveAll(tmp)
		return false, fmt.Errorf("publishing cache entry: %w", err)
	}
	return true, nil
}

// lockPath takes an exclusive lock on the file at path (created when missing), waiting for
// it while ctx allows. The lock ends with the process, so a killed runner leaves none.
func lockPath(ctx context.Context, path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating cache folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening cache lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// linkModule fills dst, a new folder, with links to the entries of the cached module tree,
// and a .terraform/ of its own that links to the tree's installed modules and providers.
func linkModule(tree, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("emptying %s: %w", dst, err)
	}
	if err := os.MkdirAll(filepath.Join(dst, dataDir), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dst, err)
	}
	entries, err := os.ReadDir(tree)
	if err != nil {
		return fmt.Errorf("reading cached module: %w", err)
	}
	for _, e := range entries {
		if e.Name() == dataDir {
			continue
		}
		if err := os.Symlink(filepath.Join(tree, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return fmt.Errorf("linking cached module: %w", err)
		}
	}
	for _, sub := range []string{"modules", "providers"} {
		target := filepath.Join(tree, dataDir, sub)
		if _, err := os.Stat(target); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.Symlink(target, filepath.Join(dst, dataDir, sub)); err != nil {
			return fmt.Errorf("linking cached module: %w", err)
		}
	}
	return nil
}

// backendTemplatePath is where the backend record of runs of the module key whose requests
// set the -backend-config keys of b is kept.
func backendTemplatePath(cacheDir, key string, b Backend) string {
	keys := make([]string, 0, len(b.Config)+len(b.Maps))
	for k := range b.Config {
		keys = append(keys, k)
	}
	for k := range b.Maps {
		keys = append(keys, "map "+k)
	}
	sort.Strings(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	return filepath.Join(cacheDir, cacheBackends, key+"-"+hex.EncodeToString(sum[:])[:16]+".json")
}

// errNotTemplate: a backend record that cannot serve other runs.
var errNotTemplate = errors.New("backend record cannot be reused")

// renderBackendState is the backend record of template (tofu's .terraform/terraform.tfstate)
// with b's -backend-config values in place of the template's. Every key of b.Config must hold
// a string in the template, every key of b.Maps an object, and every other setting must be
// unset (null, or an empty block list), so that the result is what `tofu init` would have
// recorded for b; otherwise the error wraps errNotTemplate.
func renderBackendState(template []byte, b Backend) ([]byte, error) {
	var file map[string]json.RawMessage
	if err := json.Unmarshal(template, &file); err != nil {
		return nil, fmt.Errorf("%w: %w", errNotTemplate, err)
	}
	var backend map[string]json.RawMessage
	if err := json.Unmarshal(file["backend"], &backend); err != nil {
		return nil, fmt.Errorf("%w: no backend: %w", errNotTemplate, err)
	}
	var typ string
	if err := json.Unmarshal(backend["type"], &typ); err != nil || typ != b.Type {
		return nil, fmt.Errorf("%w: backend type %s, not %s", errNotTemplate, backend["type"], b.Type)
	}
	var config map[string]json.RawMessage
	if err := json.Unmarshal(backend["config"], &config); err != nil {
		return nil, fmt.Errorf("%w: no backend configuration: %w", errNotTemplate, err)
	}
	for _, k := range append(slices.Collect(maps.Keys(b.Config)), slices.Collect(maps.Keys(b.Maps))...) {
		if _, ok := config[k]; !ok {
			return nil, fmt.Errorf("%w: no setting %s", errNotTemplate, k)
		}
	}
	for k, raw := range config {
		if m, ok := b.Maps[k]; ok {
			if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
				return nil, fmt.Errorf("%w: setting %s is no map", errNotTemplate, k)
			}
			config[k], _ = json.Marshal(m)
			continue
		}
		v, ok := b.Config[k]
		if !ok {
			if unset := bytes.TrimSpace(raw); !bytes.Equal(unset, []byte("null")) && !bytes.Equal(unset, []byte("[]")) {
				return nil, fmt.Errorf("%w: setting %s is set by something other than the request", errNotTemplate, k)
			}
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || !bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) {
			return nil, fmt.Errorf("%w: setting %s is no string", errNotTemplate, k)
		}
		config[k], _ = json.Marshal(v)
	}
	var err error
	if backend["config"], err = json.Marshal(config); err != nil {
		return nil, err
	}
	if file["backend"], err = json.Marshal(backend); err != nil {
		return nil, err
	}
	return json.MarshalIndent(file, "", "    ")
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// tofuWrapper returns the version-probe wrapper of the tofu binary at path (see the
// module cache), making it on first use, the binary's identity and its version.
func tofuWrapper(ctx context.Context, cacheDir, path string, env []string) (string, string, *version.Version, error) {
	id, err := tofuID(path)
	if err != nil {
		return "", "", nil, err
	}
	dir := filepath.Join(cacheDir, cacheTofu, id)
	_, err = publish(ctx, dir, func(tmp string) error {
		resolved, err := filepath.EvalSymlinks(path)
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, resolved, "version", "-json")
		cmd.Env, cmd.Dir = env, tmp
		version, err := cmd.Output()
		if err != nil || !json.Valid(version) {
			return fmt.Errorf("tofu version -json: %w", err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "version.json"), version, 0o600); err != nil {
			return err
		}
		script := "#!/bin/sh\n" +
			"# Written by the fulfiller: terraform-exec asks every tofu it drives for its version once;\n" +
			"# this answers with what the binary below answered, and runs the binary for anything else.\n" +
			"if [ \"$#\" -eq 2 ] && [ \"$1\" = version ] && [ \"$2\" = -json ]; then\n" +
			"\tprintf '%s\\n' " + shellQuote(string(bytes.TrimSpace(version))) + "\n\texit 0\nfi\n" +
			"exec " + shellQuote(resolved) + " \"$@\"\n"
		return os.WriteFile(filepath.Join(tmp, "tofu"), []byte(script), 0o755)
	})
	if err != nil {
		return "", "", nil, fmt.Errorf("preparing tofu %s: %w", path, err)
	}
	reported, err := os.ReadFile(filepath.Join(dir, "version.json"))
	if err != nil {
		return "", "", nil, fmt.Errorf("preparing tofu %s: %w", path, err)
	}
	v, err := parseTofuVersion(reported)
	if err != nil {
		return "", "", nil, fmt.Errorf("preparing tofu %s: %w", path, err)
	}
	return filepath.Join(dir, "tofu"), id, v, nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// envList turns an environment map into KEY=value entries.
func envList(env map[string]string) []string {
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return list
}

// writeWorkspace selects a workspace in a working directory the way `tofu workspace select`
// does, by naming it in .terraform/environment. Backends that keep workspaces (pg,
// kubernetes, s3) create a missing one when the operation first uses it.
func writeWorkspace(moduleDir, name string) error {
	if name == "" {
		return nil
	}
	return WriteFileAtomic(filepath.Join(moduleDir, dataDir, workspaceFile), []byte(name), 0o600)
}

// cachedRun is a run that works in a folder of links to a cached module.
type cachedRun struct {
	req       Request
	moduleDir string
	key       string
	// tofu is the version-probe wrapper of Request.TofuPath.
	tofu string
	out  *runLog
}

// useModuleCache prepares moduleDir for a run of the cached module of req, making the cache
// entry first when there is none. It fails with errShortcutsTofu, before it touches
// moduleDir, for a tofu outside ShortcutsTofu.
func useModuleCache(ctx context.Context, req Request, env map[string]string, moduleDir string, out *runLog, phases *phaseClock) (*cachedRun, error) {
	tofu, id, v, err := tofuWrapper(ctx, req.CacheDir, req.TofuPath, envList(env))
	if err != nil {
		return nil, err
	}
	if err := checkShortcutsTofu(v); err != nil {
		return nil, err
	}
	cliConfig, _ := os.ReadFile(env["TF_CLI_CONFIG_FILE"]) // tofu itself reports one it cannot read
	key, err := moduleKey(req.ModuleDir, req.Backend.Type, id, cliConfig)
	if err != nil {
		return nil, err
	}
	tree := filepath.Join(req.CacheDir, cacheModules, key)
	made, err := publish(ctx, tree, func(tmp string) error {
		out.note("info", "adding module "+req.ModuleDir+" to the module cache (tofu init -backend=false)")
		if err := copyTree(req.ModuleDir, tmp); err != nil {
			return fmt.Errorf("copying module %s: %w", req.ModuleDir, err)
		}
		if copied, err := moduleKey(tmp, req.Backend.Type, id, cliConfig); err != nil || copied != key {
			return fmt.Errorf("module %s changed while it was copied", req.ModuleDir)
		}
		if err := writeBackendFile(tmp, req.Backend); err != nil {
			return err
		}
		tf, err := newTofu(tmp, tofu, env, out)
		if err != nil {
			return err
		}
		if err := tf.InitJSON(ctx, out, tfexec.Backend(false)); err != nil {
			return fmt.Errorf("tofu init: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if made {
		phases.end(PhaseCache)
	}
	if err := linkModule(tree, moduleDir); err != nil {
		return nil, err
	}
	return &cachedRun{req: req, moduleDir: moduleDir, key: key, tofu: tofu, out: out}, nil
}

// configureBackend gives the run its backend record: from the cache's template when there
// is one, otherwise by `tofu init`. The first run to initialise a template's backend does so
// under the template's lock and saves its record as the template; runs that arrive meanwhile
// wait for it.
func (c *cachedRun) configureBackend(ctx context.Context, tf *tfexec.Terraform) error {
	path := backendTemplatePath(c.req.CacheDir, c.key, c.req.Backend)
	unusable := path + ".unusable"
	for {
		template, err := os.ReadFile(path)
		if err == nil {
			record, err := renderBackendState(template, c.req.Backend)
			if err != nil {
				c.out.note("info", "not using the module cache's backend record: "+err.Error())
				return c.init(ctx, tf)
			}
			return WriteFileAtomic(filepath.Join(c.moduleDir, dataDir, backendStateFile), record, 0o600)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("reading the module cache: %w", err)
		}
		if _, err := os.Stat(unusable); err == nil {
			return c.init(ctx, tf)
		}
		unlock, err := lockPath(ctx, path+".lock")
		if err != nil {
			return err
		}
		_, errTemplate := os.Stat(path)
		_, errUnusable := os.Stat(unusable)
		if errTemplate == nil || errUnusable == nil {
			unlock()
			continue // made while we waited
		}
		err = c.init(ctx, tf)
		if err == nil {
			c.saveTemplate(path, unusable)
		}
		unlock()
		return err
	}
}

// init runs `tofu init` for the run. It installs modules and providers of its own: the
// cache's are only ever read.
func (c *cachedRun) init(ctx context.Context, tf *tfexec.Terraform) error {
	for _, sub := range []string{"modules", "providers"} {
		if err := os.Remove(filepath.Join(c.moduleDir, dataDir, sub)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("preparing init: %w", err)
		}
	}
	return initBackend(ctx, tf, c.out, c.req.Backend)
}

// saveTemplate keeps the backend record `tofu init` wrote for this run as the template of
// later runs, or marks the template unusable when the record holds more than the request's
// values.
func (c *cachedRun) saveTemplate(path, unusable string) {
	record, err := os.ReadFile(filepath.Join(c.moduleDir, dataDir, backendStateFile))
	if err != nil {
		return
	}
	rendered, err := renderBackendState(record, c.req.Backend)
	if err == nil && !sameJSON(rendered, record) {
		err = fmt.Errorf("%w: it does not hold the request's values as given", errNotTemplate)
	}
	if err != nil {
		c.out.note("info", "later runs of this module initialise their backend themselves: "+err.Error())
		_ = WriteFileAtomic(unusable, []byte(err.Error()+"\n"), 0o600)
		return
	}
	_ = WriteFileAtomic(path, record, 0o600)
}
