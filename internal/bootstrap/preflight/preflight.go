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

// kubeadm's ConfigMaps in kube-system that `kubeadm join` reads with the bootstrap token right
// after discovery, the init phase that uploads each and the Role that lets tokens read it
// (k8s.io/kubernetes cmd/kubeadm/app/phases/uploadconfig and phases/kubelet).
var kubeadmConfigMaps = []struct{ name, phase, role string }{
	{"kubeadm-config", "kubeadm", "kubeadm:nodes-kubeadm-config"},
	{"kubelet-config", "kubelet", "kubeadm:kubelet-config"},
}

// Check checks, before any machine is bought, that the cluster lets a machine join the
// way the fulfiller's user data asks: token discovery can read the public cluster-info, a
// token of bootstrap.DefaultGroup may read kubeadm's kubeadm-config and kubelet-config (without
// them `kubeadm join` stops right after discovery: a control plane not made by kubeadm, such as
// k3s, RKE2 or a managed one, has neither) and may create CSRs that are approved automatically
// (kubeadm's bootstrapper RBAC). It asks the API server's authorizer with SubjectAccessReviews,
// so it holds for whatever RBAC or other authorizer the cluster runs. It returns nil when a
// join would work.
func Check(ctx context.Context, c client.Client, reader client.Reader) (*Failure, error) {
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, cm)
	if apierrors.IsNotFound(err) || (err == nil && cm.Data[bootstrapapi.KubeConfigKey] == "") {
		return &Failure{v1alpha1.ReasonClusterInfoMissing, "kube-public/cluster-info with a kubeconfig is missing: machines cannot discover the cluster with their token (kubeadm creates it)"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading cluster-info: %w", err)
	}
	for _, kc := range kubeadmConfigMaps {
		err := reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: kc.name}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return &Failure{v1alpha1.ReasonKubeadmConfigMissing, fmt.Sprintf(
				"kube-system/%s is missing: kubeadm join reads it right after discovery, so every machine would boot and fail to join; "+
					"the control plane was not made by kubeadm (k3s, RKE2 and managed ones have none): `kubeadm init phase upload-config %s` uploads it",
				kc.name, kc.phase)}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading kube-system/%s: %w", kc.name, err)
		}
	}
	bootstrapper := authorizationv1.SubjectAccessReviewSpec{
		User:   bootstrapapi.BootstrapUserPrefix + "preflight",
		Groups: []string{bootstrapapi.BootstrapDefaultGroup, bootstrap.DefaultGroup, "system:authenticated"},
	}
	type check struct {
		spec    authorizationv1.SubjectAccessReviewSpec
		attrs   authorizationv1.ResourceAttributes
		failure Failure
	}
	checks := []check{
		{
			spec:  authorizationv1.SubjectAccessReviewSpec{User: "system:anonymous", Groups: []string{"system:unauthenticated"}},
			attrs: authorizationv1.ResourceAttributes{Namespace: metav1.NamespacePublic, Verb: "get", Resource: "configmaps", Name: bootstrapapi.ConfigMapClusterInfo},
			failure: Failure{v1alpha1.ReasonClusterInfoNotPublic,
				"anonymous clients may not read kube-public/cluster-info: token discovery would fail (kubeadm's Role kubeadm:bootstrap-signer-clusterinfo grants it)"},
		},
	}
	for _, kc := range kubeadmConfigMaps {
		checks = append(checks, check{
			spec:  bootstrapper,
			attrs: authorizationv1.ResourceAttributes{Namespace: metav1.NamespaceSystem, Verb: "get", Resource: "configmaps", Name: kc.name},
			failure: Failure{v1alpha1.ReasonKubeadmConfigForbidden, fmt.Sprintf(
				"bootstrap tokens (group %s) may not read kube-system/%s: kubeadm join would stop right after discovery; kubeadm's Role and RoleBinding %s grant it",
				bootstrap.DefaultGroup, kc.name, kc.role)},
		})
	}
	checks = append(checks, []check{
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
	}...)
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
