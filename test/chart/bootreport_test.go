// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/reportaccess"
)

// TestBootReportAccess: the chart's Role, RoleBinding and ValidatingAdmissionPolicy that let a
// claim's token report for its own claim are the ones the local environment and the tests
// use (reportaccess.Objects), whose refusals are tested against a real API server there.
func TestBootReportAccess(t *testing.T) {
	const ns = "fulfiller-system"
	m := render(t, ns)
	for _, want := range reportaccess.Objects(ns, "fulfiller-boot-report") {
		switch w := want.(type) {
		case *rbacv1.Role:
			got := find[*rbacv1.Role](t, m, w.Name)
			if got.Namespace != ns || !equality.Semantic.DeepEqual(got.Rules, w.Rules) {
				t.Errorf("Role %s: %+v, want %+v in %s", w.Name, got.Rules, w.Rules, ns)
			}
		case *rbacv1.RoleBinding:
			got := find[*rbacv1.RoleBinding](t, m, w.Name)
			if got.Namespace != ns || !equality.Semantic.DeepEqual(got.RoleRef, w.RoleRef) || !equality.Semantic.DeepEqual(got.Subjects, w.Subjects) {
				t.Errorf("RoleBinding %s: %+v %+v, want %+v %+v", w.Name, got.RoleRef, got.Subjects, w.RoleRef, w.Subjects)
			}
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			got := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, m, w.Name)
			if !equality.Semantic.DeepEqual(got.Spec, w.Spec) {
				t.Errorf("ValidatingAdmissionPolicy %s:\n%+v\nwant\n%+v", w.Name, got.Spec, w.Spec)
			}
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			got := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, m, w.Name)
			if !equality.Semantic.DeepEqual(got.Spec, w.Spec) {
				t.Errorf("ValidatingAdmissionPolicyBinding %s: %+v, want %+v", w.Name, got.Spec, w.Spec)
			}
		default:
			t.Fatalf("unexpected %T", want)
		}
	}
}
