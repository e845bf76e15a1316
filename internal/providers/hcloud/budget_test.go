// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// TestAPIDemands: runs with one token share their project's hourly budget, another token is
// another project, the token never shows, and a destroy takes less than an apply.
func TestAPIDemands(t *testing.T) {
	families, err := family.NewRegistry(NewFamily())
	if err != nil {
		t.Fatal(err)
	}
	run := func(op tfrunner.Operation, token string) executor.APIDemand {
		t.Helper()
		d := families.APIDemands(tfrunner.Request{Family: v1alpha1.FamilyHcloud, Operation: op, Env: map[string]string{EnvToken: token}})
		if len(d) != 1 {
			t.Fatalf("demands %+v, want one", d)
		}
		return d[0]
	}
	const token = "s3cr3t-project-token-of-64-characters-xxxxxxxxxxxxxxxxxxxxxxxxxx"
	apply, destroy, other := run(tfrunner.Apply, token), run(tfrunner.Destroy, token), run(tfrunner.Apply, "another-token")
	if apply.Budget != destroy.Budget || apply.Budget == other.Budget {
		t.Errorf("budgets %q, %q, %q: one per token", apply.Budget, destroy.Budget, other.Budget)
	}
	if strings.Contains(apply.Budget, token) || !strings.HasPrefix(apply.Budget, "the Hetzner Cloud project of token ") {
		t.Errorf("budget name %q", apply.Budget)
	}
	if apply.Limit != 3600 || apply.Per != time.Hour || apply.Requests != ApplyRequests || destroy.Requests != DestroyRequests || destroy.Requests >= apply.Requests {
		t.Errorf("apply %+v, destroy %+v", apply, destroy)
	}
	if d := families.APIDemands(tfrunner.Request{Family: "", Operation: tfrunner.Apply}); d != nil {
		t.Errorf("generic family demands %+v", d)
	}
}
