// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package preflight

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// Failure says why a join with a bootstrap token would fail on this cluster; Reason
// is one of the JoinPreflight reasons of api/v1alpha1.
type Failure struct {
	Reason  string
	Message string
}

// Check checks, before any machine is bought, that the cluster lets a machine join the
// way the fulfiller's user data asks: token discovery can read the public cluster-info, and a
// token of bootstrap.DefaultGroup may create CSRs that are approved automatically (kubeadm's
// bootstrapper RBAC). It asks the API server's authorizer with SubjectAccessReviews, so it
// holds for whatever RBAC or other authorizer the cluster runs. It returns nil when a join
// would work.
func Check(ctx context.Context, c client.Client, reader client.Reader) (*Failure, error) {
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm)
	if apierrors.IsNotFound(err) || (err == nil && cm.Data[bootstrapapi.KubeConfigKey] == "") {
		return &Failure{v1alpha1.ReasonClusterInfoMissing, "kube-public/cluster-info with a kubeconfig is missing: machines cannot discover the cluster with their token (kubeadm creates it)"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading cluster-info: %w", err)
	}
	bootstrapper := authorizationv1.SubjectAccessReviewSpec{
		User:   bootstrapapi.BootstrapUserPrefix + "preflight",
		Groups: []string{bootstrapapi.BootstrapDefaultGroup, bootstrap.DefaultGroup, "system:authenticated"},
	}
	checks := []struct {
		spec    authorizationv1.SubjectAccessReviewSpec
		attrs   authorizationv1.ResourceAttributes
		failure Failure
	}{
		{
			spec:  authorizationv1.SubjectAccessReviewSpec{User: "system:anonymous", Groups: []string{"system:unauthenticated"}},
			attrs: authorizationv1.ResourceAttributes{Namespace: metav1.NamespacePublic, Verb: "get", Resource: "configmaps", Name: bootstrapapi.ConfigMapClusterInfo},
			failure: Failure{v1alpha1.ReasonClusterInfoNotPublic,
				"anonymous clients may not read kube-public/cluster-info: token discovery would fail (kubeadm's Role kubeadm:bootstrap-signer-clusterinfo grants it)"},
		},
		{
			spec:  bootstrapper,
			attrs: authorizationv1.ResourceAttributes{Group: certificatesv1.GroupName, Verb: "create", Resource: "certificatesigningrequests"},
			failure: Failure{v1alpha1.ReasonBootstrapRBACMissing,
				"bootstrap tokens (group " + bootstrap.DefaultGroup + ") may not create CertificateSigningRequests: bind ClusterRole system:node-bootstrapper to that group (kubeadm:kubelet-bootstrap)"},
		},
		{
			spec:  bootstrapper,
			attrs: authorizationv1.ResourceAttributes{Group: certificatesv1.GroupName, Verb: "create", Resource: "certificatesigningrequests", Subresource: "nodeclient"},
			failure: Failure{v1alpha1.ReasonCSRAutoApprovalMissing,
				"kubelet CSRs of bootstrap tokens (group " + bootstrap.DefaultGroup + ") would not be approved: bind ClusterRole system:certificates.k8s.io:certificatesigningrequests:nodeclient to that group (kubeadm:node-autoapprove-bootstrap)"},
		},
	}
	for _, chk := range checks {
		sar := &authorizationv1.SubjectAccessReview{Spec: chk.spec}
		sar.Spec.ResourceAttributes = &chk.attrs
		if err := c.Create(ctx, sar); err != nil {
			return nil, fmt.Errorf("asking the authorizer (%s %s): %w", chk.attrs.Verb, chk.attrs.Resource, err)
		}
		if !sar.Status.Allowed {
			f := chk.failure
			return &f, nil
		}
	}
	return nil, nil
}
