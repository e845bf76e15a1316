// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

func TestInspectModulePrefersTofuFiles(t *testing.T) {
	info, err := InspectModule(moduleDir(t, "tofu-files"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ModuleVariable{"node_name": {Required: true}, "user_data": {Required: true, Sensitive: true}}
	if !reflect.DeepEqual(info.Variables, want) {
		t.Errorf("variables = %+v, want %+v", info.Variables, want)
	}
	if _, ok := info.Outputs[OutputProviderID]; !ok {
		t.Errorf("outputs = %+v, want provider_id from outputs.tofu.json", info.Outputs)
	}
	if err := info.CheckContract(); err != nil {
		t.Errorf("contract: %v", err)
	}
}

func TestInspectModuleErrors(t *testing.T) {
	for _, dir := range []string{moduleDir(t, "syntax-error"), filepath.Join(t.TempDir(), "missing")} {
		if _, err := InspectModule(dir); !errors.Is(err, ErrInvalidModule) {
			t.Errorf("InspectModule(%s) = %v, want ErrInvalidModule", dir, err)
		}
	}
}

func TestCheckContract(t *testing.T) {
	info := &ModuleInfo{
		Variables: map[string]ModuleVariable{"user_data": {Required: true}, "image": {Required: true}, "size": {}},
		Outputs:   map[string]ModuleOutput{"addresses": {}},
	}
	err := info.CheckContract()
	if !errors.Is(err, ErrInvalidModule) {
		t.Fatalf("CheckContract() = %v", err)
	}
	for _, want := range []string{"no output provider_id", "does not pass: image", "user_data is not marked sensitive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}

func TestPrepareModuleCopiesModuleFilesOnly(t *testing.T) {
	src := filepath.Join(t.TempDir(), "module")
	if err := copyTree(moduleDir(t, "tofu-files"), src); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		".terraform/providers/x": "x", "terraform.tfstate": "{}", "x.auto.tfvars.json": "{}",
		".terraform.lock.hcl": "# lock", "scripts/run.sh": "#!/bin/sh",
	} {
		path := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "work", "module")
	if err := os.MkdirAll(filepath.Join(dst, "stale"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := prepareModule(src, dst); err != nil {
		t.Fatal(err)
	}
	var got []string
	_ = filepath.WalkDir(dst, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, path)
			got = append(got, rel)
		}
		return err
	})
	want := []string{".terraform.lock.hcl", "main.tf", "main.tofu", "outputs.tofu.json", "scripts/hello.sh", "scripts/run.sh"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("copied %v, want %v", got, want)
	}
	if info, err := os.Stat(filepath.Join(dst, "scripts/run.sh")); err != nil || info.Mode().Perm()&0o100 == 0 {
		t.Errorf("script lost its mode: %v %v", info, err)
	}
}

func TestWriteVarsFilePassesDeclaredOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), varsFileName)
	info := &ModuleInfo{Variables: map[string]ModuleVariable{"node_name": {}, "user_data": {Sensitive: true}}}
	passed, skipped, err := writeVarsFile(path, map[string]any{"node_name": "n", "user_data": "u", "zone": "z", "labels": map[string]string{}}, info)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(passed, []string{"node_name", "user_data"}) || !reflect.DeepEqual(skipped, []string{"labels", "zone"}) {
		t.Errorf("passed %v, skipped %v", passed, skipped)
	}
	if got := testenv.ReadFile(t, path); strings.Contains(got, "zone") || !strings.Contains(got, `"user_data": "u"`) {
		t.Errorf("variables file:\n%s", got)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("variables file mode %v", st.Mode().Perm())
	}
}

func TestRunLogRedactsAndCollects(t *testing.T) {
	var out strings.Builder
	l := newRunLog(&out, []string{testUserData})
	diag := `{"@level":"error","type":"diagnostic","diagnostic":{"severity":"error","summary":"boom","detail":"saw ` +
		jsonEscape(testUserData) + `"}}`
	// Written in pieces that split lines, as a pipe may deliver them.
	for _, piece := range []string{diag[:10], diag[10:] + "\n" + `{"type":"log","@message":"content: token=abcdef.0123456789abcdef-SECRET"}` + "\n", "tail"} {
		if _, err := l.Write([]byte(piece)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.stderr().Write([]byte("Error: x\n\n")); err != nil {
		t.Fatal(err)
	}
	l.flush()
	got := out.String()
	assertNoSecret(t, "log", got)
	if n := strings.Count(got, "\n"); n != 4 {
		t.Errorf("got %d lines, want 4:\n%s", n, got)
	}
	if !strings.Contains(got, `"@module":"tofu.stderr"`) {
		t.Errorf("stderr line not wrapped:\n%s", got)
	}
	diags := l.diagnostics()
	if len(diags) != 1 || diags[0].Summary != "boom" || diags[0].Detail != "saw (redacted)" {
		t.Errorf("diagnostics = %+v", diags)
	}
}

// TestEnvSecrets: the secrets inside a run's environment are found where tools print them
// from: a connection string's password (read up to the last '@', and up to the first), the
// key=value form's password, and the passphrase of the encryption configuration.
func TestEnvSecrets(t *testing.T) {
	enc, _ := json.Marshal(map[string]any{"key_provider": map[string]any{"pbkdf2": map[string]any{"k": map[string]any{"passphrase": "pass$${phrase}-0123456789"}}}})
	values, passwords, pieces := envSecrets(map[string]string{
		"PG_CONN_STR":   "postgres://u:pa@ss#word/x@db:5432/states",
		"OTHER_DB":      "host=db user=u password=kv-secret-1 dbname=x",
		"TF_ENCRYPTION": string(enc),
		"HCLOUD_TOKEN":  "hcloud-token-value",
	})
	for _, want := range []string{"hcloud-token-value", "postgres://u:pa@ss#word/x@db:5432/states"} {
		if !slices.Contains(values, want) {
			t.Errorf("values %q lack %q", values, want)
		}
	}
	for _, want := range []string{"pa@ss#word/x", "pa", "kv-secret-1", "pass$${phrase}-0123456789", "pass${phrase}-0123456789"} {
		if !slices.Contains(passwords, want) {
			t.Errorf("passwords %q lack %q", passwords, want)
		}
	}
	for _, want := range []string{"ss", "word", "x"} {
		if !slices.Contains(pieces, want) {
			t.Errorf("pieces %q lack %q", pieces, want)
		}
	}
	var out strings.Builder
	l := newRunLog(&out, nil)
	l.addSecrets(minEnvLen, values)
	l.addSecrets(minEnvLen, passwords)
	l.addSecrets(minPieceLen, pieces)
	l.note("error", `parse "postgres://u:pa@ss": lookup word on dns; key kv-secret-1; `+strconv.Quote(`pass${phrase}-0123456789`))
	for _, leaked := range []string{"ss#", "word", "kv-secret-1", "phrase}-0123"} {
		if strings.Contains(out.String(), leaked) {
			t.Errorf("the log shows %q: %s", leaked, out.String())
		}
	}
}

func TestRunEnv(t *testing.T) {
	req := Request{WorkDir: t.TempDir(), Env: map[string]string{"HCLOUD_TOKEN": "t", "HOME": "/custom"}}
	env, err := runEnv(req)
	if err != nil {
		t.Fatal(err)
	}
	if env["HCLOUD_TOKEN"] != "t" || env["HOME"] != "/custom" || env["CHECKPOINT_DISABLE"] != "1" || env["PATH"] == "" {
		t.Errorf("env = %v", env)
	}
	if _, err := os.Stat(env["TF_CLI_CONFIG_FILE"]); err != nil {
		t.Errorf("cli config: %v", err)
	}
	// The binary is first on PATH as BinaryCommand, for provisioners that run it without a
	// shell; a relative name is made absolute, and a second run's link replaces the first's.
	bin := filepath.Join(t.TempDir(), "fulfiller-dev")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(bin))
	req.Env = map[string]string{BinaryEnv: "./fulfiller-dev"}
	for range 2 {
		if env, err = runEnv(req); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(req.WorkDir, binSubdir)
	if !strings.HasPrefix(env["PATH"], dir+string(os.PathListSeparator)) {
		t.Errorf("PATH = %s, want %s first", env["PATH"], dir)
	}
	if target, err := os.Readlink(filepath.Join(dir, BinaryCommand)); err != nil || target != bin {
		t.Errorf("%s links to %q (%v), want %s", BinaryCommand, target, err, bin)
	}
	req.Env = map[string]string{"TF_VAR_token": "x", "TF_LOG": "trace"}
	if _, err := runEnv(req); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "TF_LOG, TF_VAR_token") {
		t.Errorf("prohibited env: %v", err)
	}
}
