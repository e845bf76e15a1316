// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package providers_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/family"
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

// TestBillingPeriods: the families that say how their machines are billed are the ones the
// TofuNodeClass's scaleDown validation rules let turn the policy on without a period, with
// the periods those rules check the margin against (api/v1alpha1/tofunodeclass.go).
func TestBillingPeriods(t *testing.T) {
	want := map[string]time.Duration{"hcloud": time.Hour, "robot": 730 * time.Hour}
	got := map[string]time.Duration{}
	for name, f := range providers.Families() {
		if b, ok := f.(family.Billing); ok {
			got[name] = b.BillingPeriod()
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("billing periods %v, the API's rules expect %v", got, want)
	}
}

// TestZoneLabels: Hetzner Cloud's CSI driver pins volumes to a location by
// csi.hetzner.cloud/location, and the family's zones are those locations; the binaries'
// families register with Karpenter without a conflict.
func TestZoneLabels(t *testing.T) {
	got := map[string][]string{}
	for name, f := range providers.Families() {
		if z, ok := f.(family.ZoneLabels); ok {
			got[name] = z.ZoneLabels()
		}
	}
	want := map[string][]string{"hcloud": {"csi.hetzner.cloud/location"}}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("zone labels %v, want %v", got, want)
	}
}
