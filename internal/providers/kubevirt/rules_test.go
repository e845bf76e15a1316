// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt/kubevirtrules"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestRulesFixtures: the error diagnostics of real runs of modules/kubevirt (captured from
// TestModuleForbiddenNamespace's run log) get their class, and their one-line message brings
// the API server's answer forward.
func TestRulesFixtures(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		class   tfrunner.ErrorClass
		want    string
	}{
		{"forbidden-namespace", tfrunner.Credentials,
			`secrets "kv-forbidden-userdata" is forbidden: User "system:serviceaccount:kv-module-allowed:fulfiller" cannot get resource "secrets" in API group "" in the namespace "kv-module-other" (kv-module-other/kv-forbidden-userdata failed to run apply)`},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			diags := readFixture(t, tc.fixture)
			got := tfrunner.Classify(diags, errExit, kubevirtrules.Rules{})
			if got == nil || got.Class != tc.class || got.Message != tc.want {
				t.Fatalf("Classify() = %+v\nwant class %s, message %q", got, tc.class, tc.want)
			}
			// Without the family's explanation, the one line is cut before the answer.
			if generic := tfrunner.Classify(diags, errExit, nil); strings.Contains(generic.Message, "cannot get resource") {
				t.Errorf("the fixture no longer needs the explanation: %q", generic.Message)
			}
		})
	}
}

// TestRules: the infra API server's answers, as the kubectl provider wraps them.
func TestRules(t *testing.T) {
	wrap := func(answer string) tfrunner.Diagnostic {
		return tfrunner.Diagnostic{Severity: "error", Summary: "tenant/n1 failed to create kubernetes rest client for update of resource: " +
			"Resource: \"kubevirt.io/v1, Resource=virtualmachines\", GroupVersionKind: \"kubevirt.io/v1, Kind=VirtualMachine\"\nName: \"n1\", Namespace: \"tenant\"\n" +
			"from server for: \"/tmp/1kubectl_manifest.yaml\": " + answer}
	}
	for _, tc := range []struct {
		name   string
		answer string
		class  tfrunner.ErrorClass
		want   string // the message starts with it
	}{
		{"quota", `virtualmachines.kubevirt.io "n1" is forbidden: exceeded quota: vms, requested: count/virtualmachines.kubevirt.io=1, used: count/virtualmachines.kubevirt.io=4, limited: count/virtualmachines.kubevirt.io=4`,
			tfrunner.Quota, `virtualmachines.kubevirt.io "n1" is forbidden: exceeded quota: vms`},
		{"rbac", `virtualmachines.kubevirt.io "n1" is forbidden: User "system:serviceaccount:tenant:fulfiller" cannot create resource "virtualmachines" in API group "kubevirt.io" in the namespace "tenant"`,
			tfrunner.Credentials, `virtualmachines.kubevirt.io "n1" is forbidden: User "system:serviceaccount:tenant:fulfiller" cannot create`},
		{"token refused", "Unauthorized", tfrunner.Credentials, "Unauthorized (tenant/n1 failed to create kubernetes rest client"},
		{"webhook", `admission webhook "virtualmachine-validator.kubevirt.io" denied the request: spec.template.spec.domain.devices.disks[0] must have a boot order > 0, if supplied`,
			tfrunner.InvalidModule, `admission webhook "virtualmachine-validator.kubevirt.io" denied the request: spec.template`},
		{"no kubevirt", `no matches for kind "VirtualMachine" in version "kubevirt.io/v1"`, tfrunner.InvalidModule, `no matches for kind "VirtualMachine"`},
		{"unrecognised", "etcdserver: request timed out", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := wrap(tc.answer)
			class, ok := kubevirtrules.Rules{}.Classify(d)
			if tc.class == "" {
				if ok {
					t.Fatalf("Classify() = %s, want no match", class)
				}
				return
			}
			if !ok || class != tc.class {
				t.Fatalf("Classify() = %s, %v; want %s", class, ok, tc.class)
			}
			msg := tfrunner.Classify([]tfrunner.Diagnostic{d}, errExit, kubevirtrules.Rules{}).Message
			if !strings.HasPrefix(msg, tc.want) || len(msg) > v1alpha1.MaxMessageLength {
				t.Errorf("message %q, want it to start with %q", msg, tc.want)
			}
		})
	}
}

// errExit stands in for tofu's exit error.
var errExit = &exitError{}

type exitError struct{}

func (*exitError) Error() string { return "exit status 1" }

func readFixture(t *testing.T, name string) []tfrunner.Diagnostic {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "diagnostics", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []tfrunner.Diagnostic
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := tfrunner.ParseDiagnostic(sc.Bytes()); ok {
			out = append(out, d)
		}
	}
	if err := sc.Err(); err != nil || len(out) == 0 {
		t.Fatalf("fixture %s: %d diagnostics (%v)", name, len(out), err)
	}
	return out
}
