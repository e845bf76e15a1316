// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
)

func catalogScope(s *standin.StandIn, token, prices string) family.Scope {
	nc := &v1alpha1.TofuNodeClass{Spec: v1alpha1.TofuNodeClassSpec{Family: v1alpha1.FamilyHcloud,
		Catalog: &v1alpha1.Catalog{Prices: prices}}}
	return family.Scope{Class: nc, Env: map[string]string{EnvToken: token, EnvEndpoint: s.Endpoint()}, Cluster: "prod-eu"}
}

func offering(t *testing.T, ct family.CatalogType, zone string) v1alpha1.Offering {
	t.Helper()
	for _, o := range ct.NodeType.Offerings {
		if o.Zone == zone {
			return o
		}
	}
	t.Fatalf("%s has no offering in %s: %+v", ct.NodeType.Name, zone, ct.NodeType.Offerings)
	return v1alpha1.Offering{}
}

func byName(t *testing.T, types []family.CatalogType, name string) family.CatalogType {
	t.Helper()
	for _, ct := range types {
		if ct.NodeType.Name == name {
			return ct
		}
	}
	t.Fatalf("catalogue has no %s", name)
	return family.CatalogType{}
}

// TestCatalogueResolve reads the stand-in's server types with hcloud-go: every type, its
// size, series, CPU kind and architecture, a net or gross hourly price per location, offerings
// of a sold-out location or a deprecated type unavailable, a changed price on the next read;
// a revoked token is InvalidCredentials, a missing one too, and a failing API an error.
func TestCatalogueResolve(t *testing.T) {
	s := standin.StartT(t, standin.Options{})
	f := NewFamily()
	ctx := context.Background()

	types, err := f.Resolve(ctx, catalogScope(s, s.Token(), ""))
	if err != nil {
		t.Fatal(err)
	}
	if want := len(standin.DefaultCatalog().ServerTypes); len(types) != want {
		t.Fatalf("%d types, the stand-in has %d", len(types), want)
	}
	cx23 := byName(t, types, "cx23")
	if cx23.Series != "cx" || cx23.CPU != v1alpha1.CPUShared || cx23.Cores != 2 || cx23.Memory.Cmp(resource.MustParse("4Gi")) != 0 ||
		cx23.NodeType.ArchitectureOrDefault() != "amd64" || cx23.Deprecated {
		t.Errorf("cx23 = series %s cpu %s cores %d memory %s arch %s deprecated %v", cx23.Series, cx23.CPU, cx23.Cores,
			cx23.Memory.String(), cx23.NodeType.ArchitectureOrDefault(), cx23.Deprecated)
	}
	if got := cx23.NodeType.Capacity.Memory(); got.Cmp(resource.MustParse("3700Mi")) < 0 || got.Cmp(resource.MustParse("4Gi")) >= 0 {
		t.Errorf("cx23 memory capacity %s, want what a kubelet reports of 4 GiB", got)
	}
	if o := offering(t, cx23, "fsn1"); o.Price != "0.0056" || o.Unavailable {
		t.Errorf("cx23 in fsn1 = %+v, want 0.0056 net, available", o)
	}
	if len(cx23.NodeType.Offerings) != 3 || cx23.NodeType.UserDataLimit == nil {
		t.Errorf("cx23 offerings %d (want the 3 EU locations), user data limit %v", len(cx23.NodeType.Offerings), cx23.NodeType.UserDataLimit)
	}
	if cax := byName(t, types, "cax11"); cax.Series != "cax" || cax.NodeType.Architecture != "arm64" {
		t.Errorf("cax11 = series %s arch %s", cax.Series, cax.NodeType.Architecture)
	}
	if ccx := byName(t, types, "ccx13"); ccx.CPU != v1alpha1.CPUDedicated || offering(t, ccx, "ash").Price != "0.02688" {
		t.Errorf("ccx13 = cpu %s, ash price %s (1.2 × 0.0224)", ccx.CPU, offering(t, ccx, "ash").Price)
	}

	gross, err := f.Resolve(ctx, catalogScope(s, s.Token(), "gross"))
	if err != nil {
		t.Fatal(err)
	}
	if o := offering(t, byName(t, gross, "cx23"), "fsn1"); o.Price != "0.006664" {
		t.Errorf("cx23 gross in fsn1 = %s, want 0.006664 (19%% VAT)", o.Price)
	}

	s.SetStockout("cx33", "nbg1", true)
	s.SetDeprecated("cpx22", true)
	if !s.SetPrice("cx23", "fsn1", 0.02) {
		t.Fatal("no cx23 price in fsn1")
	}
	types, err = f.Resolve(ctx, catalogScope(s, s.Token(), ""))
	if err != nil {
		t.Fatal(err)
	}
	if o := offering(t, byName(t, types, "cx33"), "nbg1"); !o.Unavailable {
		t.Error("a sold-out offering is available")
	}
	if o := offering(t, byName(t, types, "cx33"), "fsn1"); o.Unavailable {
		t.Error("cx33 in fsn1 is unavailable; only nbg1 is sold out")
	}
	cpx22 := byName(t, types, "cpx22")
	for _, o := range cpx22.NodeType.Offerings {
		if !o.Unavailable || !cpx22.Deprecated {
			t.Errorf("deprecated cpx22 in %s is launchable", o.Zone)
		}
	}
	if o := offering(t, byName(t, types, "cx23"), "fsn1"); o.Price != "0.02" {
		t.Errorf("cx23 in fsn1 = %s after the price was raised to 0.02", o.Price)
	}

	var fe *family.Error
	if _, err := f.Resolve(ctx, catalogScope(s, "", "")); !errors.As(err, &fe) || fe.Reason != v1alpha1.ReasonInvalidCredentials {
		t.Errorf("no token: %v, want InvalidCredentials", err)
	}
	s.Fail(standin.Failure{Times: 10, PathPrefix: "/server_types", Code: "service_error"})
	if _, err := f.Resolve(ctx, catalogScope(s, s.Token(), "")); err == nil || errors.As(err, &fe) {
		t.Errorf("failing API: %v, want an error that is not the family's verdict", err)
	}
	s.RevokeToken()
	if _, err := f.Resolve(ctx, catalogScope(s, s.Token(), "")); !errors.As(err, &fe) || fe.Reason != v1alpha1.ReasonInvalidCredentials {
		t.Errorf("revoked token: %v, want InvalidCredentials", err)
	}
}
