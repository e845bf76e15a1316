// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// runnerEnv makes the test binary act as `fulfiller run`, so an executor.Local can start real
// runner processes (and a test can kill one).
const runnerEnv = "STATELOCK_TEST_RUNNER"

// moduleCache is the module cache every run of these tests shares, as the runs of a local
// executor with the runner shortcuts do (tfrunner.Request.Shortcuts): the states, locks, workspaces and encryption checked here are those of runs
// that link a cached module and write their backend record from the cache's template.
var moduleCache string

func TestMain(m *testing.M) {
	if os.Getenv(runnerEnv) == "1" {
		os.Exit(tfrunner.Main(os.Args[1:], nil))
	}
	dir, err := os.MkdirTemp("", "statelock-module-cache-")
	if err != nil {
		panic(err)
	}
	moduleCache = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// fakeToken is a recognisable bootstrap token in the user data; it must appear in no state,
// log or message.
const fakeToken = "q7w3e9.zx81c5v0b2n4m6l8"

// Passphrases of the tests: like the token, in no log or message.
const (
	testPassphrase  = `p4ss "phrase" with ${not.a.reference} and %{ if x }`
	wrongPassphrase = "another passphrase, 16+ chars"
	pgPassphrase    = "a passphrase for pg states"
)

const userData = "#cloud-config\nwrite_files:\n- path: /etc/kubeadm/join.yaml\n  content: |\n    token: " + fakeToken + "\n"

// userDataHash is what modules/sim keeps of the user data in its state (a replacement
// trigger): plain in an unencrypted state.
func userDataHash() string {
	sum := sha256.Sum256([]byte(userData))
	return hex.EncodeToString(sum[:])
}

// fakeFulfiller stands in for the fulfiller binary that modules/sim's provisioners run to
// power a simulated machine on and off: these tests are about state, not machines. Its
// `sim start` says that the machine runs, as the real one does once it does.
func fakeFulfiller(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fulfiller")
	script := `#!/bin/sh
if [ "$1 $2" = "sim start" ]; then
	while [ $# -gt 0 ]; do
		if [ "$1" = --name ]; then
			echo "machine $2 running (pid $$), log: /dev/null"
		fi
		shift
	done
fi
exit 0
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func tofu(t *testing.T) string {
	t.Helper()
	path, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func simModule(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "modules", "sim"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// simRun is an operation of modules/sim for claim name, with the given backend and
// environment (backend credentials, encryption).
func simRun(t *testing.T, name string, op tfrunner.Operation, backend tfrunner.Backend, workspace string, env map[string]string, params map[string]string) tfrunner.Request {
	t.Helper()
	p := map[string]string{"sim_dir": t.TempDir()}
	for k, v := range params {
		p[k] = v
	}
	e := map[string]string{"FULFILLER_BINARY": fakeFulfiller(t)}
	for k, v := range env {
		e[k] = v
	}
	return tfrunner.Request{
		Name:      name + "-" + string(op),
		Operation: op,
		ModuleDir: simModule(t),
		WorkDir:   t.TempDir(),
		CacheDir:  moduleCache,
		Shortcuts: true,
		Backend:   backend,
		Workspace: workspace,
		Variables: map[string]any{
			tfrunner.VarNodeName:   name,
			tfrunner.VarNodeType:   "sim-small",
			tfrunner.VarZone:       "sim-1",
			tfrunner.VarUserData:   userData,
			tfrunner.VarLabels:     map[string]string{},
			tfrunner.VarParameters: p,
		},
		Env:      e,
		TofuPath: tofu(t),
	}
}

// run runs req and checks what must hold for every run: neither the token nor any secret
// value of the environment is in the log or the error message.
func run(t *testing.T, ctx context.Context, req tfrunner.Request) (tfrunner.Result, string) {
	t.Helper()
	var log testenv.SyncBuffer
	res := tfrunner.Run(ctx, req, &log, nil)
	out := log.String()
	secrets := []string{fakeToken, testPassphrase, wrongPassphrase, pgPassphrase}
	for k, v := range req.Env {
		if k != "FULFILLER_BINARY" && k != "KUBE_CONFIG_PATH" {
			secrets = append(secrets, v)
		}
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("run log of %s contains a secret (%.12s...)", req.Name, s)
		}
		if res.Error != nil && strings.Contains(res.Error.Message, s) {
			t.Errorf("error message of %s contains a secret (%.12s...)", req.Name, s)
		}
	}
	return res, out
}

func gunzip(t *testing.T, data []byte) string {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(plain)
}

// provisioning reports whether a run log shows tofu in the simulated API call, holding the
// state lock.
func provisioning(log string) bool {
	return strings.Contains(log, `"type":"provision_start"`)
}
