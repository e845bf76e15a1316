// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

func TestRunApplyThenDestroy(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	state, record := filepath.Join(tmp, "state.tfstate"), filepath.Join(tmp, "record")
	if err := os.Mkdir(record, 0o700); err != nil {
		t.Fatal(err)
	}
	req := nodeRequest(t, "node-a", "node", state, map[string]string{"record_dir": record})
	var log testenv.SyncBuffer
	res := Run(context.Background(), req, &log, testRules)
	if !res.Succeeded || res.Error != nil {
		t.Fatalf("apply failed: %+v\n%s", res.Error, log.String())
	}
	if !strings.HasPrefix(res.ProviderID, "sim://node-a/") || res.NodeName != "node-a" {
		t.Errorf("provider ID %q, node name %q", res.ProviderID, res.NodeName)
	}
	if want := []string{"10.0.0.1", "fd00::1"}; !reflect.DeepEqual(res.Addresses, want) {
		t.Errorf("addresses = %v, want %v", res.Addresses, want)
	}
	if got := string(res.Outputs["labels"]); got != `{"karpenter.sh/nodepool":"default"}` {
		t.Errorf("labels output = %s", got)
	}
	if res.Started.IsZero() || res.Finished.Before(res.Started) {
		t.Errorf("times: %v .. %v", res.Started, res.Finished)
	}

	// The module got the declared variables, the rest was not passed at all.
	if got := testenv.ReadFile(t, filepath.Join(record, "user_data")); got != testUserData {
		t.Errorf("module saw user data %q", got)
	}
	text := log.String()
	if !strings.Contains(text, "not passing variables the module does not declare: node_type, zone") {
		t.Errorf("log does not say which variables were left out:\n%s", text)
	}
	if strings.Contains(text, "undeclared variable") {
		t.Errorf("tofu was given undeclared variables:\n%s", text)
	}
	if _, err := os.Stat(filepath.Join(req.WorkDir, varsFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("variables file left behind: %v", err)
	}
	assertNoSecret(t, "run log", text)
	for i, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line %d is not JSON: %s", i+1, line)
		}
	}

	// tofu and its provisioners get an explicit environment.
	exe, _ := os.Executable()
	env := testenv.ReadFile(t, filepath.Join(record, "env"))
	for _, kv := range []string{
		"FULFILLER_BINARY=" + exe,
		"HOME=" + filepath.Join(req.WorkDir, homeSubdir),
		"TF_CLI_CONFIG_FILE=" + filepath.Join(req.WorkDir, cliConfigName),
		"CHECKPOINT_DISABLE=1",
		"TF_IN_AUTOMATION=1",
	} {
		if !strings.Contains("\n"+env, "\n"+kv+"\n") {
			t.Errorf("provisioner environment lacks %s:\n%s", kv, env)
		}
	}

	destroy := req
	destroy.Operation = Destroy
	destroy.WorkDir = t.TempDir()
	log = testenv.SyncBuffer{}
	res = Run(context.Background(), destroy, &log, testRules)
	if !res.Succeeded || res.ProviderID != "" || res.Outputs != nil {
		t.Fatalf("destroy: %+v\n%s", res, log.String())
	}
	if _, err := os.Stat(filepath.Join(record, "destroyed")); err != nil {
		t.Errorf("destroy provisioner did not run: %v", err)
	}
	var st struct{ Resources []json.RawMessage }
	if err := json.Unmarshal([]byte(testenv.ReadFile(t, state)), &st); err != nil || len(st.Resources) != 0 {
		t.Errorf("state after destroy: %d resources, %v", len(st.Resources), err)
	}
}

// One run holds the state lock while it sits in a slow provisioner: a second run on the same
// state fails with StateLocked; cancelling the first interrupts tofu within seconds, which
// releases the lock, so the next apply succeeds.
func TestRunLockHeldAndCancel(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.tfstate")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := nodeRequest(t, "node-c", "node", state, map[string]string{"sleep_seconds": "30"})
	var holderLog testenv.SyncBuffer
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, holder, &holderLog, testRules) }()
	testenv.Eventually(t, 30*time.Second, "the holder to provision", func() bool { return provisioning(holderLog.String()) })

	contender := nodeRequest(t, "node-c", "node", state, nil)
	var log testenv.SyncBuffer
	res := Run(context.Background(), contender, &log, testRules)
	if res.Error == nil || res.Error.Class != LockHeld || !res.Error.Class.Retryable() {
		t.Errorf("second run: %+v, want class %s\n%s", res.Error, LockHeld, log.String())
	}

	cancelled := time.Now()
	cancel()
	var held Result
	select {
	case held = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("cancelled run did not return within 20s")
	}
	if took := time.Since(cancelled); took > 10*time.Second {
		t.Errorf("cancelled run took %s to return", took)
	}
	if held.Error == nil || held.Error.Class != Cancelled {
		t.Fatalf("cancelled run: %+v\n%s", held.Error, holderLog.String())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(state), ".state.tfstate.lock.info")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock info left behind: %v", err)
	}

	next := nodeRequest(t, "node-c", "node", state, nil)
	log = testenv.SyncBuffer{}
	if res := Run(context.Background(), next, &log, testRules); !res.Succeeded {
		t.Errorf("apply after cancel: %+v\n%s", res.Error, log.String())
	}
}

func TestRunFailureClasses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		module string
		params map[string]string
		edit   func(*Request)
		class  ErrorClass
		want   string // in the message
	}{
		{name: "no provider_id output", module: "no-provider-id", class: InvalidModule, want: "no output provider_id"},
		{name: "empty provider_id", module: "empty-provider-id", class: InvalidModule, want: "non-empty string"},
		{name: "syntax error", module: "syntax-error", class: InvalidModule},
		{name: "undeclared reference", module: "undeclared-reference", class: InvalidModule, want: "Reference to undeclared input variable"},
		{name: "unsupported argument", module: "unsupported-argument", class: InvalidModule, want: "Unsupported argument"},
		{name: "missing required variable", module: "required-zone", class: InvalidModule, want: "No value for required variable",
			edit: func(r *Request) { delete(r.Variables, VarZone) }},
		{name: "invalid variable value", module: "invalid-value", class: InvalidModule, want: "Invalid value for variable",
			edit: func(r *Request) { r.Variables[VarNodeName] = "a-rather-long-node-name" }},
		{name: "missing module", module: "does-not-exist", class: InvalidModule},
		{name: "prohibited environment", module: "node", class: InvalidModule, want: "TF_VAR_x",
			edit: func(r *Request) { r.Env = map[string]string{"TF_VAR_x": "1"} }},
		{name: "capacity", module: "node", class: Capacity, want: "resource_unavailable: server type cx22 unavailable in fsn1",
			params: map[string]string{"fail_with": "resource_unavailable: server type cx22 unavailable in fsn1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := nodeRequest(t, "node-f", tc.module, filepath.Join(t.TempDir(), "state.tfstate"), tc.params)
			if tc.edit != nil {
				tc.edit(&req)
			}
			var log testenv.SyncBuffer
			res := Run(context.Background(), req, &log, testRules)
			if res.Succeeded || res.Error == nil {
				t.Fatalf("run succeeded:\n%s", log.String())
			}
			if res.Error.Class != tc.class || !strings.Contains(res.Error.Message, tc.want) {
				t.Errorf("error = %v, want class %s with %q\n%s", res.Error, tc.class, tc.want, log.String())
			}
			if strings.Contains(res.Error.Message, "\n") || len(res.Error.Message) > v1alpha1.MaxMessageLength {
				t.Errorf("message is not one bounded line: %q", res.Error.Message)
			}
			if res.ProviderID != "" || res.Outputs != nil {
				t.Errorf("failed run has outputs: %+v", res)
			}
			assertNoSecret(t, "run log", log.String())
		})
	}
}

// An apply's outputs come from its -json stream; only sensitive contract outputs, which the
// stream leaves out, take a `tofu output` run.
func TestRunOutputs(t *testing.T) {
	t.Parallel()
	phaseNames := func(res Result) []string {
		var names []string
		for _, p := range res.Phases {
			names = append(names, p.Name)
		}
		return names
	}
	for _, tc := range []struct {
		module     string
		providerID string
		addresses  []string
		outputs    map[string]string
		output     bool // a `tofu output` phase
	}{
		{module: "node", providerID: "sim://node-o/", addresses: []string{"10.0.0.1", "fd00::1"},
			outputs: map[string]string{"node_name": `"node-o"`, "labels": `{"karpenter.sh/nodepool":"default"}`}},
		{module: "sensitive-outputs", providerID: "sim://node-o", addresses: []string{"10.0.0.9"},
			outputs: map[string]string{"zone": `"sim-1"`}, output: true},
	} {
		t.Run(tc.module, func(t *testing.T) {
			t.Parallel()
			req := nodeRequest(t, "node-o", tc.module, filepath.Join(t.TempDir(), "state.tfstate"), nil)
			var log testenv.SyncBuffer
			res := Run(context.Background(), req, &log, testRules)
			if !res.Succeeded {
				t.Fatalf("apply: %+v\n%s", res.Error, log.String())
			}
			if !strings.HasPrefix(res.ProviderID, tc.providerID) || !reflect.DeepEqual(res.Addresses, tc.addresses) {
				t.Errorf("provider ID %q, addresses %v", res.ProviderID, res.Addresses)
			}
			for name, want := range tc.outputs {
				if got := string(res.Outputs[name]); got != want {
					t.Errorf("output %s = %s, want %s", name, got, want)
				}
			}
			if _, ok := res.Outputs[OutputProviderID]; ok == tc.output {
				t.Errorf("outputs %v: a sensitive provider_id is not kept, another one is", res.Outputs)
			}
			names := phaseNames(res)
			if slices.Contains(names, PhaseOutput) != tc.output {
				t.Errorf("phases %v: want a %s phase: %v", names, PhaseOutput, tc.output)
			}
			if want := []string{PhaseStart, PhaseModule, PhaseVersion, PhaseInit, string(Apply)}; !reflect.DeepEqual(names[:len(want)], want) {
				t.Errorf("phases %v, want them to start with %v", names, want)
			}
			if !strings.Contains(log.String(), "fulfiller: phases: start ") {
				t.Errorf("the log does not show the phases:\n%s", log.String())
			}
		})
	}
}
