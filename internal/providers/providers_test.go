// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package providers_test

import (
	"reflect"
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/providers"
	"github.com/fulfiller-sh/fulfiller/internal/providers/rules"
)

// TestRunnerRulesAreTheFamilies: the runner binary (cmd/fulfiller-runner) classifies a run's
// failures with the rules the families give the controller's own runner, family by family.
func TestRunnerRulesAreTheFamilies(t *testing.T) {
	want := providers.Families().Rules()
	if got := rules.Set(); !reflect.DeepEqual(got, want) {
		t.Errorf("runner rules %#v, the families' %#v", got, want)
	}
	if len(want) != 4 {
		t.Errorf("the families give rules for %d families, want the simulated type, hcloud, kubevirt and robot: %#v", len(want), want)
	}
}
