// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

func TestCatalogAges(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	class := func(name string, catalogue bool, refreshedAgo time.Duration) v1alpha1.TofuNodeClass {
		nc := v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
		nc.Spec.Family = "hcloud"
		if catalogue {
			nc.Spec.Catalog = &v1alpha1.Catalog{}
		}
		if refreshedAgo > 0 {
			nc.Status.Catalog = &v1alpha1.CatalogStatus{Refreshed: &metav1.Time{Time: now.Add(-refreshedAgo)}}
		}
		return nc
	}
	got := catalogAges([]v1alpha1.TofuNodeClass{
		class("live", true, 90*time.Second),
		class("never-read", true, 0),
		class("static", false, 0),
	}, now)
	if want := []catalogAge{{class: "live", family: "hcloud", seconds: 90}}; !slices.Equal(got, want) {
		t.Errorf("catalogAges = %+v, want %+v", got, want)
	}
	if catalogResult(nil) != "Succeeded" || catalogResult(errors.New("503")) != "Failed" {
		t.Error("catalogResult")
	}
}
