// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// DefaultModuleRefresh is how often a class's module source is resolved again.
const DefaultModuleRefresh = 10 * time.Minute

// failedModuleRetry is how soon a source that could not be resolved is tried again.
const failedModuleRetry = 30 * time.Second

// moduleResolver resolves module sources (tfrunner.FetchModule) and keeps what each resolved
// to, per source and credentials, so that a source is fetched at most once per refresh
// interval however many classes and reconciles ask for it, not per claim. Sources are
// fetched in parallel: a slow or unreachable one holds up only the classes that use it.
type moduleResolver struct {
	clock   clock.Clock
	tofu    string // the tofu binary fetches run ("": found on PATH)
	dir     string // fetches are kept under it
	refresh time.Duration
	// fetch is tfrunner's fetch of a source with a registry source's version constraint
	// (moduleResolver.fetchSource; a test's stand-in).
	fetch func(ctx context.Context, source, version string, env map[string]string) (*tfrunner.ResolvedModule, string, error)

	mu    sync.Mutex // guards reads, and each moduleRead's used
	reads map[string]*moduleRead
}

type moduleRead struct {
	// mu is held while the source is read: one fetch of a source at a time, the others
	// waiting for its result. It guards the fields below but used.
	mu sync.Mutex
	// good is the last successful resolution (nil before one); failure what the last
	// attempt failed with (nil after a success), at attempted.
	good      *tfrunner.ResolvedModule
	read      time.Time
	failure   error
	attempted time.Time
	fetchDir  string    // the fetch good.Dir is in ("" for a local source)
	used      time.Time // when a class last asked for it
}

// forgetAfter is how long a resolution no class asks for is kept (with its fetch) after
// the last ask, in refresh intervals: a class that changed its source leaves no fetch behind.
const forgetAfter = 3

func newModuleResolver(clk clock.Clock, tofu, dir string, refresh time.Duration) *moduleResolver {
	if refresh <= 0 {
		refresh = DefaultModuleRefresh
	}
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "fulfiller-modules")
	}
	r := &moduleResolver{clock: clk, tofu: tofu, dir: dir, refresh: refresh, reads: map[string]*moduleRead{}}
	r.fetch = r.fetchSource
	return r
}

// resolve is what source (a registry source with its version constraint version) resolved
// to with the environment env (the class's credentials): the cached resolution while it is
// younger than the refresh interval, else a new one. A failed refresh keeps the last good
// resolution (and logs the failure); with none, the failure is returned, retried after
// failedModuleRetry.
func (r *moduleResolver) resolve(ctx context.Context, source, version string, env map[string]string) (*tfrunner.ResolvedModule, time.Time, error) {
	rd := r.entry(resolveKey(source, version, env))
	rd.mu.Lock()
	defer rd.mu.Unlock()
	now := r.clock.Now()
	switch {
	case rd.good != nil && now.Sub(rd.read) < r.refresh:
		return rd.good, rd.read, nil
	case rd.good == nil && rd.failure != nil && now.Sub(rd.attempted) < failedModuleRetry:
		return nil, time.Time{}, rd.failure
	}
	got, fetchDir, err := r.fetch(ctx, source, version, env)
	rd.attempted = now
	if err != nil {
		rd.failure = err
		if rd.good != nil {
			log.FromContext(ctx).Error(err, "refreshing a module source failed; claims keep using its last resolution", "source", source, "digest", rd.good.Digest)
			return rd.good, rd.read, nil
		}
		return nil, time.Time{}, err
	}
	if rd.fetchDir != "" && rd.fetchDir != fetchDir {
		_ = os.RemoveAll(rd.fetchDir)
	}
	rd.good, rd.read, rd.failure, rd.fetchDir = got, now, nil, fetchDir
	return got, now, nil
}

// entry is the record of key, made when missing and marked used now; records no class asked
// for in forgetAfter refresh intervals go, with their fetches, unless one is being read.
func (r *moduleResolver) entry(key string) *moduleRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for k, old := range r.reads {
		if k == key || now.Sub(old.used) <= forgetAfter*r.refresh || !old.mu.TryLock() {
			continue
		}
		if old.fetchDir != "" {
			_ = os.RemoveAll(old.fetchDir)
		}
		delete(r.reads, k)
		old.mu.Unlock()
	}
	rd := r.reads[key]
	if rd == nil {
		rd = &moduleRead{}
		r.reads[key] = rd
	}
	rd.used = now
	return rd
}

func (r *moduleResolver) fetchSource(ctx context.Context, source, version string, env map[string]string) (*tfrunner.ResolvedModule, string, error) {
	if tfrunner.IsLocalSource(source) {
		got, err := tfrunner.FetchModule(ctx, r.tofu, source, "", "", nil)
		return got, "", err
	}
	return tfrunner.FetchRemoteModule(ctx, r.tofu, source, version, r.dir, env)
}

// resolveKey identifies a source fetched with a version constraint and an environment (the
// values hashed, never kept).
func resolveKey(source, version string, env map[string]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q\n", source, version)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(h, "%q=%q\n", k, env[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// moduleCheck resolves the class's module sources (its own and its node types') into
// status.modules and checks the module contract on what each resolved to
// (tfrunner.CheckModuleDir, the check `fulfiller module check` runs), naming every violation
// with its file and line: a source that cannot be fetched or a module that breaks the
// contract fails ModuleValid before any machine is bought.
func (c *Controller) moduleCheck(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
	sources := nc.ModuleSources()
	var env map[string]string
	if slices.ContainsFunc(sources, func(m v1alpha1.ModuleSource) bool { return !tfrunner.IsLocalSource(m.Source) }) {
		// Fetching with the class's credentials (git tokens, TF_TOKEN_<host>); when they
		// cannot be read, CredentialsReady says why and the fetch goes without them.
		if creds, err := classconfig.ReadCredentials(ctx, c.apiReader, c.secretNamespace, nc.Spec.Credentials); err == nil {
			env = creds
		} else if _, ok := classconfig.AsConfigError(err); !ok {
			return verdict{}, err
		}
	}
	statuses := make([]v1alpha1.ModuleStatus, 0, len(sources))
	for _, m := range sources {
		st, v := c.resolveModule(ctx, m, env)
		if !v.passed {
			if len(sources) > 1 {
				v.message = "module " + m.Source + ": " + v.message
			}
			nc.Status.Modules = nil
			return v, nil
		}
		// A source other than a registry one resolves alike whatever its version says.
		if !slices.ContainsFunc(statuses, func(s v1alpha1.ModuleStatus) bool { return s.Source == st.Source && s.Version == "" }) {
			statuses = append(statuses, st)
		}
	}
	nc.Status.Modules = statuses
	return passed, nil
}

// resolveModule resolves one module and checks what it resolved to.
func (c *Controller) resolveModule(ctx context.Context, m v1alpha1.ModuleSource, env map[string]string) (v1alpha1.ModuleStatus, verdict) {
	source, constraint := m.Source, ""
	if reason, err := checkSource(source); err != nil {
		return v1alpha1.ModuleStatus{}, failedCheck(reason, err)
	}
	if err := tfrunner.CheckModuleVersion(source, m.Version); err != nil {
		return v1alpha1.ModuleStatus{}, failedCheck(v1alpha1.ReasonInvalidModule, err)
	}
	if tfrunner.IsLocalSource(source) {
		env = nil
	}
	if tfrunner.IsRegistrySource(source) {
		constraint = m.Version
	}
	got, resolved, err := c.modules.resolve(ctx, source, constraint, env)
	if err != nil {
		reason := v1alpha1.ReasonInvalidModule
		if errors.Is(err, tfrunner.ErrModuleFetch) {
			reason = v1alpha1.ReasonModuleNotFound
		}
		return v1alpha1.ModuleStatus{}, failedCheck(reason, err)
	}
	violations, err := tfrunner.CheckModuleDir(got.Dir)
	if err == nil {
		err = tfrunner.ViolationsError(violations)
	}
	if err != nil {
		return v1alpha1.ModuleStatus{}, failedCheck(v1alpha1.ReasonInvalidModule, err)
	}
	at := metav1.NewTime(resolved)
	return v1alpha1.ModuleStatus{Source: source, Constraint: constraint, Pinned: got.Pinned, Commit: got.Commit,
		Version: got.Version, Digest: got.Digest, Resolved: &at}, passed
}

// checkSource refuses a source that names no module before anything is fetched: a local
// source must be an absolute path to a folder.
func checkSource(source string) (string, error) {
	if !tfrunner.IsLocalSource(source) {
		if source == "" || source[0] == '.' {
			return v1alpha1.ReasonModuleNotFound, fmt.Errorf("module source %q must be an absolute path or a remote source", source)
		}
		return "", nil
	}
	if info, err := os.Stat(source); err != nil || !info.IsDir() {
		return v1alpha1.ReasonModuleNotFound, fmt.Errorf("module source %s is not a folder", source)
	}
	return "", nil
}
