// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package simulated

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestErrorRulesOnRealRuns fails real tofu runs of modules/sim in its simulated cloud API
// (parameters.apply_error) and checks the class the runner gives each with the family's rules:
// the reason users see.
func TestErrorRulesOnRealRuns(t *testing.T) {
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	module, err := filepath.Abs(filepath.Join("..", "..", "..", "modules", "sim"))
	if err != nil {
		t.Fatal(err)
	}
	rules := tfrunner.RuleSet{v1alpha1.FamilySim: hcloudrules.Rules{}}
	for _, tc := range []struct {
		applyError string
		class      tfrunner.ErrorClass
		want       string // in the message
	}{
		{"capacity", tfrunner.Capacity, "resource_unavailable: server type sim-small is not available in sim-1"},
		{"quota", tfrunner.Quota, "server_limit_exceeded"},
		{"credentials", tfrunner.Credentials, "unable to authenticate (unauthorized)"},
		{"transient", tfrunner.Transient, "rate_limit_exceeded"},
		{"invalid", tfrunner.InvalidModule, "invalid_input"},
	} {
		t.Run(tc.applyError, func(t *testing.T) {
			t.Parallel()
			name := "rules-" + tc.applyError
			req := tfrunner.Request{
				Name:      name,
				Operation: tfrunner.Apply,
				Family:    v1alpha1.FamilySim,
				ModuleDir: module,
				WorkDir:   t.TempDir(),
				Backend:   tfrunner.Backend{Type: "local", Config: map[string]string{"path": filepath.Join(t.TempDir(), "state.tfstate")}},
				Variables: map[string]any{
					tfrunner.VarNodeName:   name,
					tfrunner.VarNodeType:   "sim-small",
					tfrunner.VarZone:       "sim-1",
					tfrunner.VarUserData:   "#cloud-config\n",
					tfrunner.VarLabels:     map[string]string{},
					tfrunner.VarParameters: map[string]string{"sim_dir": t.TempDir(), "apply_error": tc.applyError},
				},
				TofuPath: tofu,
			}
			var log testenv.SyncBuffer
			res := tfrunner.Run(context.Background(), req, &log, rules)
			if res.Succeeded || res.Error == nil {
				t.Fatalf("run succeeded:\n%s", log.String())
			}
			if res.Error.Class != tc.class || !strings.Contains(res.Error.Message, tc.want) {
				t.Errorf("error = %v, want class %s with %q\n%s", res.Error, tc.class, tc.want, log.String())
			}
		})
	}
}
