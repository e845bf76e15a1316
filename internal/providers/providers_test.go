// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package providers_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/providers"
	"github.com/fulfiller-sh/fulfiller/internal/providers/rules"
)

// TestEveryFamilyHasRules: the runners classify a run's failures by its family's rules, so
// the rules registry names exactly the families the binaries know.
func TestEveryFamilyHasRules(t *testing.T) {
	families := providers.Families().Names()
	set := rules.Set()
	if got := slices.Sorted(maps.Keys(set)); !slices.Equal(got, families) {
		t.Errorf("rules for families %v, the binaries know %v", got, families)
	}
	for name, r := range set {
		if r == nil {
			t.Errorf("family %s: nil rules", name)
		}
	}
}
