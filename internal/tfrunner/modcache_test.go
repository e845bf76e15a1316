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
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// kubernetesRecord is what `tofu init -backend-config=secret_suffix=abc
// -backend-config=namespace=default` (tofu 1.12) writes to .terraform/terraform.tfstate.
const kubernetesRecord = `{
    "version": 3,
    "backend": {
        "type": "kubernetes",
        "config": {
            "client_certificate": null,
            "client_key": null,
            "cluster_ca_certificate": null,
            "config_context": null,
            "config_context_auth_info": null,
            "config_context_cluster": null,
            "config_path": null,
            "config_paths": null,
            "exec": [],
            "host": null,
            "in_cluster_config": null,
            "insecure": null,
            "labels": null,
            "load_config_file": null,
            "namespace": "default",
            "password": null,
            "secret_suffix": "abc",
            "token": null,
            "username": null
        },
        "hash": 2627546192
    }
}`

func TestRenderBackendState(t *testing.T) {
	kube := func(config map[string]string) Backend { return Backend{Type: "kubernetes", Config: config} }
	for _, tc := range []struct {
		name     string
		template string
		backend  Backend
		want     map[string]string // settings of the result
		err      string
	}{
		{name: "the run's values replace the template's", template: kubernetesRecord,
			backend: kube(map[string]string{"secret_suffix": `claim-"x"\y`, "namespace": "states"}),
			want:    map[string]string{"secret_suffix": `"claim-\"x\"\\y"`, "namespace": `"states"`, "config_path": "null", "exec": "[]"}},
		{name: "the same values give the same record", template: kubernetesRecord,
			backend: kube(map[string]string{"secret_suffix": "abc", "namespace": "default"}),
			want:    map[string]string{"secret_suffix": `"abc"`, "namespace": `"default"`}},
		{name: "a map replaces the template's", template: strings.Replace(kubernetesRecord, `"labels": null`, `"labels": {"fulfiller.sh/nodeclaim-uid": "uid-a"}`, 1),
			backend: Backend{Type: "kubernetes", Config: map[string]string{"secret_suffix": "abc", "namespace": "default"},
				Maps: map[string]map[string]string{"labels": {"fulfiller.sh/nodeclaim-uid": "uid-b"}}},
			want: map[string]string{"labels": `{"fulfiller.sh/nodeclaim-uid":"uid-b"}`, "secret_suffix": `"abc"`}},
		{name: "a map the template has no value for", template: kubernetesRecord,
			backend: Backend{Type: "kubernetes", Config: map[string]string{"secret_suffix": "abc", "namespace": "default"},
				Maps: map[string]map[string]string{"labels": {"a": "b"}}},
			err: "setting labels is no map"},
		{name: "a key the template has no value for", template: kubernetesRecord,
			backend: kube(map[string]string{"secret_suffix": "x", "namespace": "y", "config_path": "/k"}),
			err:     "setting config_path is no string"},
		{name: "a template value the request does not set", template: kubernetesRecord,
			backend: kube(map[string]string{"secret_suffix": "x"}),
			err:     "setting namespace is set by something other than the request"},
		{name: "a key the backend does not have", template: kubernetesRecord,
			backend: kube(map[string]string{"secret_suffix": "x", "namespace": "y", "bucket": "z"}),
			err:     "no setting bucket"},
		{name: "another backend type", template: kubernetesRecord,
			backend: Backend{Type: "pg", Config: map[string]string{"schema_name": "x"}},
			err:     "backend type"},
		{name: "a record without a backend", template: `{"version": 3}`,
			backend: kube(map[string]string{"secret_suffix": "x"}), err: "no backend"},
		{name: "not JSON", template: `{`, backend: kube(nil), err: "cannot be reused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := renderBackendState([]byte(tc.template), tc.backend)
			if tc.err != "" {
				if !errors.Is(err, errNotTemplate) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want errNotTemplate with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var file struct {
				Version int
				Backend struct {
					Type   string
					Hash   uint64
					Config map[string]json.RawMessage
				}
			}
			if err := json.Unmarshal(got, &file); err != nil {
				t.Fatalf("result is not a backend record: %v\n%s", err, got)
			}
			if file.Version != 3 || file.Backend.Type != "kubernetes" || file.Backend.Hash != 2627546192 || len(file.Backend.Config) != 19 {
				t.Errorf("record changed beyond its values:\n%s", got)
			}
			for k, want := range tc.want {
				var compact bytes.Buffer
				_ = json.Compact(&compact, file.Backend.Config[k])
				if v := compact.String(); v != want {
					t.Errorf("%s = %s, want %s", k, v, want)
				}
			}
		})
	}
}

func TestModuleKey(t *testing.T) {
	write := func(dir string, files map[string]string) string {
		for name, content := range files {
			path := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	module := map[string]string{"main.tf": "resource \"terraform_data\" \"x\" {}\n", "sub/sub.tf": "output \"a\" { value = 1 }\n"}
	key := func(dir, backend, tofu string) string {
		t.Helper()
		k, err := moduleKey(dir, backend, tofu, []byte("provider_installation {}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	base := key(write(t.TempDir(), module), "kubernetes", "tofu-1")

	// What a run does not copy does not count: tofu's data, state and variable files.
	noise := write(t.TempDir(), module)
	write(noise, map[string]string{".terraform/x": "1", "terraform.tfstate": "{}", "x.auto.tfvars": "a = 1", ".git/HEAD": "ref"})
	if got := key(noise, "kubernetes", "tofu-1"); got != base {
		t.Errorf("files a run does not copy changed the key")
	}
	for name, dir := range map[string]string{
		"a changed file":     write(write(t.TempDir(), module), map[string]string{"sub/sub.tf": "output \"a\" { value = 2 }\n"}),
		"an added file":      write(write(t.TempDir(), module), map[string]string{"extra.tf": "\n"}),
		"a lock file":        write(write(t.TempDir(), module), map[string]string{".terraform.lock.hcl": "# lock\n"}),
		"a file moved a dir": write(t.TempDir(), map[string]string{"main.tf": module["main.tf"], "sub.tf": module["sub/sub.tf"]}),
	} {
		if key(dir, "kubernetes", "tofu-1") == base {
			t.Errorf("%s kept the key", name)
		}
	}
	// Permissions a copy cannot keep (group and others' write, under the umask) do not
	// count, so that a module checked out as 0664 is cached: its copy must have its key.
	shared := write(t.TempDir(), module)
	for _, name := range []string{"main.tf", "sub/sub.tf"} {
		if err := os.Chmod(filepath.Join(shared, name), 0o664); err != nil {
			t.Fatal(err)
		}
	}
	copied := filepath.Join(t.TempDir(), "copy")
	if err := copyTree(shared, copied); err != nil {
		t.Fatal(err)
	}
	if key(shared, "kubernetes", "tofu-1") != base || key(copied, "kubernetes", "tofu-1") != base {
		t.Errorf("group-writable files, or their copy, changed the key")
	}
	// Whether a file is executable does.
	script := write(t.TempDir(), module)
	if err := os.Chmod(filepath.Join(script, "main.tf"), 0o700); err != nil {
		t.Fatal(err)
	}
	if key(script, "kubernetes", "tofu-1") == base {
		t.Errorf("an executable file kept the key")
	}
	same := write(t.TempDir(), module)
	if key(same, "pg", "tofu-1") == base || key(same, "kubernetes", "tofu-2") == base {
		t.Errorf("another backend type or tofu kept the key")
	}
	if k, err := moduleKey(same, "kubernetes", "tofu-1", []byte("other")); err != nil || k == base {
		t.Errorf("another CLI configuration kept the key (%v)", err)
	}
}

// TestRunsShareTheModuleCache runs claims of one module through one module cache against a
// real API server and the kubernetes backend: the first run makes the cache entry and the
// backend template, the others wait for them and run without `tofu init`; every claim's
// state is its own; nothing writes into the cache entry; a changed module gets an entry of
// its own.
func TestRunsShareTheModuleCache(t *testing.T) {
	cp := testenv.StartT(t, testenv.Options{})
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	module := t.TempDir()
	if err := copyTree(moduleDir(t, "node"), module); err != nil {
		t.Fatal(err)
	}
	record := t.TempDir()
	request := func(claim string, op Operation) Request {
		req := nodeRequest(t, claim, "node", "", map[string]string{"record_dir": filepath.Join(record, claim)})
		if err := os.MkdirAll(filepath.Join(record, claim), 0o700); err != nil {
			t.Fatal(err)
		}
		req.Name, req.Operation, req.ModuleDir, req.CacheDir, req.Shortcuts = claim+"-"+string(op), op, module, cache, true
		req.Backend = Backend{Type: "kubernetes", Config: map[string]string{"secret_suffix": claim, "namespace": "default"},
			Maps: map[string]map[string]string{"labels": {keys.LabelNodeClaimUID: "uid-" + claim}}}
		req.Env = map[string]string{"KUBE_CONFIG_PATH": cp.Kubeconfig}
		return req
	}
	runAll := func(op Operation, claims ...string) []string {
		t.Helper()
		logs := make([]string, len(claims))
		var wg sync.WaitGroup
		for i, claim := range claims {
			wg.Go(func() {
				var log testenv.SyncBuffer
				res := Run(context.Background(), request(claim, op), &log, nil)
				logs[i] = log.String()
				if !res.Succeeded {
					t.Errorf("%s of %s: %+v\n%s", op, claim, res.Error, logs[i])
				} else if op == Apply && !strings.HasPrefix(res.ProviderID, "sim://"+claim+"/") {
					t.Errorf("%s: provider ID %q", claim, res.ProviderID)
				}
			})
		}
		wg.Wait()
		return logs
	}
	// tofu init says this once it configures a backend; the cache entry's init has none.
	const backendInit = "Initializing the backend..."
	count := func(logs []string, s string) int {
		n := 0
		for _, l := range logs {
			n += strings.Count(l, s)
		}
		return n
	}

	logs := runAll(Apply, "cache-a", "cache-b", "cache-c")
	if n := count(logs, "to the module cache"); n != 1 {
		t.Errorf("%d runs made a cache entry, want 1", n)
	}
	if n := count(logs, backendInit); n != 1 {
		t.Errorf("%d runs initialised the backend, want 1 (the others use the template)", n)
	}
	entries := listDir(t, filepath.Join(cache, cacheModules))
	if len(entries) != 1 {
		t.Fatalf("module cache entries: %v", entries)
	}
	tree := filepath.Join(cache, cacheModules, entries[0])
	before := snapshot(t, tree)
	for _, claim := range []string{"cache-a", "cache-b", "cache-c"} {
		// Each state carries its own claim's labels, also when the backend was configured
		// from the template another claim's run made.
		secret, err := cs.CoreV1().Secrets("default").Get(context.Background(), "tfstate-default-"+claim, metav1.GetOptions{})
		if err != nil {
			t.Errorf("state of %s: %v", claim, err)
		} else if got := secret.Labels[keys.LabelNodeClaimUID]; got != "uid-"+claim {
			t.Errorf("state of %s labelled %s=%q", claim, keys.LabelNodeClaimUID, got)
		}
	}

	logs = runAll(Destroy, "cache-a", "cache-b", "cache-c")
	if n := count(logs, backendInit) + count(logs, "to the module cache"); n != 0 {
		t.Errorf("destroys initialised (%d): the cache and template should serve them", n)
	}
	for _, claim := range []string{"cache-a", "cache-b", "cache-c"} {
		if _, err := os.Stat(filepath.Join(record, claim, "destroyed")); err != nil {
			t.Errorf("destroy of %s did not reach its machine: %v", claim, err)
		}
	}
	if after := snapshot(t, tree); after != before {
		t.Errorf("runs wrote into the cache entry:\nbefore %s\nafter  %s", before, after)
	}

	// A changed module is another entry; the first entry stays as it was.
	if err := os.WriteFile(filepath.Join(module, "extra.tf"), []byte("# changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs = runAll(Apply, "cache-d")
	if n := count(logs, "to the module cache"); n != 1 {
		t.Errorf("the changed module made %d cache entries, want 1", n)
	}
	if entries := listDir(t, filepath.Join(cache, cacheModules)); len(entries) != 2 {
		t.Errorf("module cache entries after a change: %v", entries)
	}
	if after := snapshot(t, tree); after != before {
		t.Errorf("the first entry changed")
	}
	runAll(Destroy, "cache-d")

	// The plain path (tofu's public surface only, the default) and the shortcuts give the
	// same result for the same request.
	t.Run("PlainAndShortcutsAgree", func(t *testing.T) {
		results := map[bool]Result{}
		for _, shortcuts := range []bool{false, true} {
			claim := map[bool]string{false: "cache-plain", true: "cache-short"}[shortcuts]
			for _, op := range []Operation{Apply, Destroy} {
				req := request(claim, op)
				req.Shortcuts = shortcuts
				var log testenv.SyncBuffer
				res := Run(context.Background(), req, &log, nil)
				if !res.Succeeded {
					t.Fatalf("%s of %s (shortcuts %t): %+v\n%s", op, claim, shortcuts, res.Error, log.String())
				}
				if inits := strings.Contains(log.String(), backendInit); inits == shortcuts {
					t.Errorf("%s of %s (shortcuts %t): tofu init ran %t, want %t:\n%s", op, claim, shortcuts, inits, !shortcuts, log.String())
				}
				if op == Apply {
					results[shortcuts] = res
				}
			}
			if _, err := os.Stat(filepath.Join(record, claim, "destroyed")); err != nil {
				t.Errorf("the destroy of %s did not reach its machine: %v", claim, err)
			}
		}
		// The same outputs but for the claim's name and the machine's ID.
		normal := func(res Result) string {
			data, _ := json.Marshal(res.Outputs)
			out := strings.ReplaceAll(string(data), "cache-plain", "CLAIM")
			out = strings.ReplaceAll(out, "cache-short", "CLAIM")
			id := res.ProviderID[strings.LastIndex(res.ProviderID, "/")+1:]
			return strings.ReplaceAll(out, id, "ID")
		}
		if plain, short := normal(results[false]), normal(results[true]); plain != short {
			t.Errorf("outputs differ:\nplain     %s\nshortcuts %s", plain, short)
		}
	})

	// The shortcuts were written for ShortcutsTofu: with a tofu that reports another
	// version, a run with them asked for takes the plain path, with the same result.
	t.Run("OnlyWithTheirTofu", func(t *testing.T) {
		other := otherVersionTofu(t, tofuPath(t), "1.13.0")
		otherCache := t.TempDir()
		for _, op := range []Operation{Apply, Destroy} {
			req := request("cache-e", op)
			req.TofuPath, req.CacheDir = other, otherCache
			var log testenv.SyncBuffer
			res := Run(context.Background(), req, &log, nil)
			if !res.Succeeded {
				t.Fatalf("%s with tofu 1.13.0: %+v\n%s", op, res.Error, log.String())
			}
			// The run log is JSON: json.Marshal escapes < and >.
			range_, _ := json.Marshal(ShortcutsTofu)
			want := "runner shortcuts are written for tofu " + strings.Trim(string(range_), `"`) + ", not 1.13.0: this run uses tofu's public surface only"
			if !strings.Contains(log.String(), want) {
				t.Errorf("%s: the log does not say %q:\n%s", op, want, log.String())
			}
			if !strings.Contains(log.String(), backendInit) {
				t.Errorf("%s: tofu init did not run:\n%s", op, log.String())
			}
		}
		if _, err := os.Stat(filepath.Join(otherCache, cacheModules)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a run with tofu 1.13.0 used the module cache: %v", err)
		}
		if _, err := os.Stat(filepath.Join(record, "cache-e", "destroyed")); err != nil {
			t.Errorf("the destroy did not reach its machine: %v", err)
		}
	})
}

// otherVersionTofu is a tofu that answers `tofu version -json` with version v and runs the
// real binary at real for anything else: a stand-in for a tofu release the runner's
// shortcuts were not written for.
func otherVersionTofu(t *testing.T, real, v string) string {
	t.Helper()
	reported, err := json.Marshal(map[string]any{"terraform_version": v, "platform": "linux_amd64", "provider_selections": map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tofu")
	script := "#!/bin/sh\nif [ \"$1\" = version ]; then\n\techo " + shellQuote(string(reported)) + "\n\texit 0\nfi\nexec " + shellQuote(real) + " \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// listDir lists the folders in dir, leaving out lock files.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// snapshot sums the names, modes and contents of everything in dir.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		names = append(names, rel)
		fmt.Fprintf(h, "%s %v %d\n", rel, info.Mode(), info.ModTime().UnixNano())
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h.Write(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return fmt.Sprintf("%d entries %s", len(names), hex.EncodeToString(h.Sum(nil))[:16])
}

// TestBackendConfig: -backend-config values in key order; a map is an HCL object, in key
// order, with template sequences escaped.
func TestBackendConfig(t *testing.T) {
	got := backendConfig(Backend{Type: "kubernetes", Config: map[string]string{"secret_suffix": "abc", "namespace": "states"},
		Maps: map[string]map[string]string{"labels": {"b.example/x": "2", "a.example/y": "1", "odd": `${x}"%{y}`}}})
	want := []string{
		`labels={"a.example/y" = "1", "b.example/x" = "2", "odd" = "$${x}\"%%{y}"}`,
		"namespace=states",
		"secret_suffix=abc",
	}
	if !slices.Equal(got, want) {
		t.Errorf("backendConfig = %q, want %q", got, want)
	}
}
