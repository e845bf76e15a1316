// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// mainEnv makes the test binary act as `fulfiller run` (see TestMain), so the local executor
// can start runners without the real fulfiller binary.
const mainEnv = "TFRUNNER_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(Main(os.Args[1:], testRules))
	}
	os.Exit(m.Run())
}

// testFamily is the family of the suite's node module: its simulated cloud API fails with
// the Hetzner Cloud API's codes (simulatedAPIErrors), which testRules know and the generic
// rules do not, as a family's rules would.
const testFamily = "test-cloud"

var testRules = RuleSet{testFamily: codeRules{
	"resource_unavailable": Capacity, "placement_error": Capacity,
	"server_limit_exceeded": Quota, "resource_limit_exceeded": Quota,
	"rate_limit_exceeded": Transient, "locked": Transient,
}}

// codeRules are a family's rules for tests: a code, as a whole word, gives a class.
type codeRules map[string]ErrorClass

func (r codeRules) Classify(d Diagnostic) (ErrorClass, bool) {
	for code, class := range r {
		if ContainsAnyWord(d.CodeText(), []string{code}) {
			return class, true
		}
	}
	return "", false
}

// testUserData stands in for the cloud-init with a join token; it must never reach a log.
const testUserData = "#cloud-config\nwrite_files:\n- path: /etc/kubeadm/join.yaml\n  content: token=abcdef.0123456789abcdef-SECRET\n"

func tofuPath(t *testing.T) string {
	t.Helper()
	path, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func moduleDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "modules", name))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// nodeRequest is an apply of module name with a local-backend state file in state.
func nodeRequest(t *testing.T, name, module, state string, params map[string]string) Request {
	t.Helper()
	if params == nil {
		params = map[string]string{}
	}
	return Request{
		Name:      name,
		Operation: Apply,
		Family:    testFamily,
		ModuleDir: moduleDir(t, module),
		WorkDir:   t.TempDir(),
		Backend:   Backend{Type: "local", Config: map[string]string{"path": state}},
		Variables: map[string]any{
			VarNodeName:   name,
			VarNodeType:   "sim-small",
			VarZone:       "sim-1",
			VarUserData:   testUserData,
			VarLabels:     map[string]string{"karpenter.sh/nodepool": "default"},
			VarParameters: params,
		},
		TofuPath: tofuPath(t),
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
	for _, s := range []string{testUserData, jsonEscape(testUserData), "abcdef.0123456789abcdef-SECRET"} {
		if strings.Contains(log, s) {
			t.Errorf("%s contains the user data (%q)", what, s)
		}
	}
}

// explainingRules are codeRules that say what broke: the summary from the code on ("" when
// the summary does not hold it).
type explainingRules struct{ codeRules }

func (r explainingRules) Explain(d Diagnostic) string {
	for code := range r.codeRules {
		if i := strings.Index(d.Summary, code); i >= 0 {
			return d.Summary[i:]
		}
	}
	return ""
}
