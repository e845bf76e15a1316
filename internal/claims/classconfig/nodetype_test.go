// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

func TestRegistrationFit(t *testing.T) {
	d := func(m time.Duration) *metav1.Duration { return &metav1.Duration{Duration: m} }
	for _, tc := range []struct {
		name        string
		apply, join *metav1.Duration
		fits        bool
		why         string
	}{
		{name: "defaults", fits: true},
		{name: "exactly the window", apply: d(5 * time.Minute), join: d(10 * time.Minute), fits: true},
		{name: "slow bare metal", apply: d(12 * time.Minute), join: d(10 * time.Minute), why: "t (apply 12m + join 10m = 22m)"},
		{name: "long join, default apply", join: d(12 * time.Minute), why: "t (apply 4m + join 12m = 16m)"},
	} {
		nt := &v1alpha1.NodeType{Name: "t", JoinTimeout: tc.join, Deadlines: v1alpha1.StageDeadlines{Apply: tc.apply}}
		fits, why := RegistrationFit(nt)
		if fits != tc.fits || why != tc.why {
			t.Errorf("%s: fits %v %q, want %v %q", tc.name, fits, why, tc.fits, tc.why)
		}
	}
}
