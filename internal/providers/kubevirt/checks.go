// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"context"
	"fmt"
	"sort"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// ClassChecks are the KubeVirt class's checks (family.ClassChecker), made before any VM is
// created: the infra cluster is named and its credentials may create VMs and their Secrets
// in every VM namespace (InfraAccessReady); each storage class the node types name exists
// (StorageClassReady).
func (f *Family) ClassChecks() []family.Check {
	return []family.Check{
		{Condition: v1alpha1.ConditionInfraAccessReady, Run: f.checkAccess},
		{Condition: v1alpha1.ConditionStorageClassReady, Run: f.checkStorageClasses},
	}
}

// access is one right the module's runs need in a VM namespace.
type access struct {
	group, resource, verb string
}

// neededAccess are the rights of examples/kubevirt/rbac-infra.yaml that an apply and a
// destroy use: the kubectl provider reads, creates, patches and deletes the Secret and the VM.
var neededAccess = []access{
	{"", "secrets", "get"}, {"", "secrets", "create"}, {"", "secrets", "patch"}, {"", "secrets", "delete"},
	{virtv1.SchemeGroupVersion.Group, "virtualmachines", "get"}, {virtv1.SchemeGroupVersion.Group, "virtualmachines", "create"},
	{virtv1.SchemeGroupVersion.Group, "virtualmachines", "patch"}, {virtv1.SchemeGroupVersion.Group, "virtualmachines", "delete"},
}

// checkAccess asks the infra API server's authorizer, as the infra identity
// (SelfSubjectAccessReview), whether the module may do what it does in each VM namespace.
func (f *Family) checkAccess(ctx context.Context, s family.Scope) error {
	c, _, err := f.infra.forScope(s, "")
	if err != nil {
		return err
	}
	for _, ns := range namespaces(s.Class) {
		var denied []string
		for _, a := range neededAccess {
			ok, reason, err := allowed(ctx, c, ns, a)
			if err != nil {
				return err
			}
			if !ok {
				d := a.verb + " " + resourceName(a)
				if reason != "" {
					d += " (" + reason + ")"
				}
				denied = append(denied, d)
			}
		}
		if len(denied) > 0 {
			return family.Errorf(v1alpha1.ReasonInfraNamespaceForbidden,
				"the infra credentials may not %s in namespace %s of the infra cluster", strings.Join(denied, ", "), ns)
		}
	}
	return nil
}

func resourceName(a access) string {
	if a.group == "" {
		return a.resource
	}
	return a.resource + "." + a.group
}

// allowed asks the authorizer whether the infra identity may do a in namespace ns (cluster
// scope when ns is empty). A token the API server refuses is InvalidCredentials.
func allowed(ctx context.Context, c client.Client, ns string, a access) (bool, string, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: a.group, Resource: a.resource, Verb: a.verb},
	}}
	if err := c.Create(ctx, review); err != nil {
		if apierrors.IsUnauthorized(err) {
			return false, "", family.Errorf(v1alpha1.ReasonInvalidCredentials, "the infra cluster refuses the credentials: %v", err)
		}
		return false, "", fmt.Errorf("asking the infra cluster's authorizer: %w", err)
	}
	return review.Status.Allowed && !review.Status.Denied, review.Status.Reason, nil
}

// checkStorageClasses looks up each storage class the node types name on the infra cluster.
// Credentials that may not read storage classes cannot tell: the check passes, and a
// missing class shows as the VM's Provisioning.
func (f *Family) checkStorageClasses(ctx context.Context, s family.Scope) error {
	byClass := map[string][]string{}
	for _, nt := range s.Class.Spec.NodeTypes {
		if sc := parameters(s.Class, nt.Name)[paramStorageClass]; sc != "" {
			byClass[sc] = append(byClass[sc], nt.Name)
		}
	}
	if len(byClass) == 0 {
		return nil
	}
	c, _, err := f.infra.forScope(s, "")
	if err != nil {
		return err
	}
	if ok, _, err := allowed(ctx, c, "", access{storagev1.GroupName, "storageclasses", "get"}); err != nil || !ok {
		return err
	}
	names := make([]string, 0, len(byClass))
	for sc := range byClass {
		names = append(names, sc)
	}
	sort.Strings(names)
	for _, sc := range names {
		switch err := c.Get(ctx, types.NamespacedName{Name: sc}, &storagev1.StorageClass{}); {
		case apierrors.IsNotFound(err):
			return family.Errorf(v1alpha1.ReasonStorageClassNotFound, "storage class %s of node type %s does not exist on the infra cluster",
				sc, strings.Join(byClass[sc], ", "))
		case err != nil:
			return fmt.Errorf("reading storage class %s: %w", sc, err)
		}
	}
	return nil
}
