// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// TestScaleDownValidation: the API server takes the billing-aware scale-down of a family that
// says how it bills (hcloud, robot) without a period, and of any other class with one; it
// refuses a generic class without a period, a margin not shorter than the period, and a
// period under a minute.
func TestScaleDownValidation(t *testing.T) {
	ctx := context.Background()
	kube := apiServer(t)
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	on := v1alpha1.ScaleDownAtPaidPeriodEnd
	for _, tc := range []struct {
		name      string
		family    string
		scaleDown *v1alpha1.ScaleDown
		want      string // in the refusal; empty: accepted
	}{
		{name: "hcloud", family: v1alpha1.FamilyHcloud, scaleDown: &v1alpha1.ScaleDown{Policy: on}},
		{name: "robot with a margin of a day", family: v1alpha1.FamilyRobot, scaleDown: &v1alpha1.ScaleDown{Policy: on, Margin: d("24h")}},
		{name: "generic with a period", scaleDown: &v1alpha1.ScaleDown{Policy: on, BillingPeriod: d("24h"), Margin: d("30m")}},
		{name: "kubevirt immediate", family: v1alpha1.FamilyKubeVirt, scaleDown: &v1alpha1.ScaleDown{Policy: v1alpha1.ScaleDownImmediate}},
		{name: "generic without a period", scaleDown: &v1alpha1.ScaleDown{Policy: on},
			want: "scaleDown.policy AtPaidPeriodEnd needs scaleDown.billingPeriod"},
		{name: "kubevirt without a period", family: v1alpha1.FamilyKubeVirt, scaleDown: &v1alpha1.ScaleDown{Policy: on},
			want: "scaleDown.policy AtPaidPeriodEnd needs scaleDown.billingPeriod"},
		{name: "margin of the whole period", scaleDown: &v1alpha1.ScaleDown{Policy: on, BillingPeriod: d("1h"), Margin: d("1h")},
			want: "scaleDown.margin must be shorter than scaleDown.billingPeriod"},
		{name: "margin over the hcloud hour", family: v1alpha1.FamilyHcloud, scaleDown: &v1alpha1.ScaleDown{Policy: on, Margin: d("90m")},
			want: "scaleDown.margin must be shorter than the family's billing period"},
		{name: "negative margin", family: v1alpha1.FamilyHcloud, scaleDown: &v1alpha1.ScaleDown{Policy: on, Margin: d("-1m")},
			want: "scaleDown.margin must not be negative"},
		{name: "period of seconds", scaleDown: &v1alpha1.ScaleDown{Policy: on, BillingPeriod: d("30s")},
			want: "scaleDown.billingPeriod must be at least 1m"},
		{name: "unknown policy", family: v1alpha1.FamilyHcloud, scaleDown: &v1alpha1.ScaleDown{Policy: "WhenCheap"},
			want: "spec.scaleDown.policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := &v1alpha1.TofuNodeClass{
				ObjectMeta: metav1.ObjectMeta{Name: "scaledown-" + strings.ReplaceAll(tc.name, " ", "-")},
				Spec: v1alpha1.TofuNodeClassSpec{Family: tc.family, Module: v1alpha1.ModuleSource{Source: "/m"},
					Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: "127.0.0.1:6443"}, ScaleDown: tc.scaleDown,
					NodeTypes: []v1alpha1.NodeType{{Name: "small",
						Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
						Offerings: []v1alpha1.Offering{{Zone: "a", Price: "0.01"}}}}},
			}
			err := kube.Create(ctx, nc)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("create = %v, want a refusal with %q", err, tc.want)
			}
		})
	}
}
