// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package reportaccess is what lets a claim's machine report its boot with the claim's own
// bootstrap token, and only for its own claim: a Role that may patch the status of
// BootReports in the controller's namespace, bound to bootstrap.ReportGroup (an extra group
// of every claim's token), and a ValidatingAdmissionPolicy that refuses any write of such a
// token but a status update of the BootReport whose spec.tokenID is the token's own. RBAC
// cannot name the one object a token may write (it knows no claim); the policy pins it. The
// chart installs the same objects (templates/bootreport-access.yaml; test/chart compares
// them), the local environment applies these.
package reportaccess

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// Messages of the policy's refusals.
const (
	MessageStatusOnly = "a claim's bootstrap token may only update the status of a BootReport"
	MessageOwnClaim   = "a claim's bootstrap token may report only for its own claim"
)

// Objects are the Role, RoleBinding, ValidatingAdmissionPolicy and its binding, named name,
// for BootReports in namespace.
func Objects(namespace, name string) []client.Object {
	return []client.Object{
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{v1alpha1.Group}, Resources: []string{"bootreports/status"}, Verbs: []string{"patch"},
			}},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: bootstrap.ReportGroup}},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionregistrationv1.Fail),
				MatchConstraints: &admissionregistrationv1.MatchResources{
					ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
						RuleWithOperations: admissionregistrationv1.RuleWithOperations{
							Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
							Rule: admissionregistrationv1.Rule{
								APIGroups: []string{v1alpha1.Group}, APIVersions: []string{"*"}, Resources: []string{"bootreports", "bootreports/status"},
							},
						},
					}},
				},
				MatchConditions: []admissionregistrationv1.MatchCondition{{
					Name:       "boot-report-token",
					Expression: `"` + bootstrap.ReportGroup + `" in request.userInfo.groups`,
				}},
				Validations: []admissionregistrationv1.Validation{
					{
						Expression: `request.operation == "UPDATE" && request.subResource == "status"`,
						Message:    MessageStatusOnly,
					},
					{
						Expression: `request.operation != "UPDATE" || request.userInfo.username == "system:bootstrap:" + oldObject.spec.tokenID`,
						Message:    MessageOwnClaim,
					},
				},
			},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	}
}
