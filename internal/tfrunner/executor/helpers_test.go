// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// mainEnv makes the test binary act as the runner (see TestMain), so the executors can start
// runners without the real binaries.
const mainEnv = "TFRUNNER_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(tfrunner.Main(os.Args[1:], testRules))
	}
	os.Exit(m.Run())
}

// testFamily is the family of the suite's node module (internal/tfrunner/testdata): its
// simulated cloud API fails with the Hetzner Cloud API's codes, as a family's rules know them.
const testFamily = "test-cloud"

var testRules = tfrunner.RuleSet{testFamily: capacityRules{}}

// capacityRules classify the simulated API's resource_unavailable as a family's rules would.
type capacityRules struct{}

func (capacityRules) Classify(d tfrunner.Diagnostic) (tfrunner.ErrorClass, bool) {
	if tfrunner.ContainsAnyWord(d.CodeText(), []string{"resource_unavailable"}) {
		return tfrunner.Capacity, true
	}
	return "", false
}

// testUserData stands in for the cloud-init with a join token; it must never reach a log.
const testUserData = "#cloud-config\nwrite_files:\n- path: /etc/kubeadm/join.yaml\n  content: token=abcdef.0123456789abcdef-SECRET\n"

// nodeRequest is an apply of internal/tfrunner's test module name, with a local-backend
// state file in state.
func nodeRequest(t *testing.T, name, module, state string, params map[string]string) tfrunner.Request {
	t.Helper()
	if params == nil {
		params = map[string]string{}
	}
	moduleDir, err := filepath.Abs(filepath.Join("..", "testdata", "modules", module))
	if err != nil {
		t.Fatal(err)
	}
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	return tfrunner.Request{
		Name:      name,
		Operation: tfrunner.Apply,
		Family:    testFamily,
		ModuleDir: moduleDir,
		WorkDir:   t.TempDir(),
		Backend:   tfrunner.Backend{Type: "local", Config: map[string]string{"path": state}},
		Variables: map[string]any{
			tfrunner.VarNodeName:   name,
			tfrunner.VarNodeType:   "sim-small",
			tfrunner.VarZone:       "sim-1",
			tfrunner.VarUserData:   testUserData,
			tfrunner.VarLabels:     map[string]string{"karpenter.sh/nodepool": "default"},
			tfrunner.VarParameters: params,
		},
		TofuPath: tofu,
	}
}

// provisioning reports whether a run log shows the machine's provisioner running, i.e. tofu
// holds the state lock and sits in the simulated API call.
func provisioning(log string) bool {
	return strings.Contains(log, `"type":"provision_start"`)
}

// assertNoSecret fails when the user data, or a line of it, appears in a log.
func assertNoSecret(t *testing.T, what, log string) {
	t.Helper()
	escaped, _ := json.Marshal(testUserData)
	for _, s := range []string{testUserData, strings.Trim(string(escaped), `"`), "abcdef.0123456789abcdef-SECRET"} {
		if strings.Contains(log, s) {
			t.Errorf("%s contains the user data (%q)", what, s)
		}
	}
}

// slowStopTofu is tofu behind a shell that passes an interrupt on only after delay, as tofu
// that waits for a provider to finish an API call it cannot abort.
func slowStopTofu(t *testing.T, delay time.Duration) string {
	t.Helper()
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tofu")
	script := fmt.Sprintf(`#!/bin/sh
%q "$@" &
child=$!
trap 'sleep %d; kill -TERM "$child" 2>/dev/null' INT TERM
while :; do
	wait "$child"
	rc=$?
	kill -0 "$child" 2>/dev/null || exit "$rc"
done
`, tofu, int(delay/time.Second))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
