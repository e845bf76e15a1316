// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BootstrapperGroup is the group kubeadm gives its default node bootstrap tokens, and the
// group the bindings below grant the TLS-bootstrap permissions to.
const BootstrapperGroup = bootstrap.DefaultGroup

// kubeadmObjects returns what `kubeadm init` creates for joining nodes (its bootstrap-token
// phase): CSR creation and auto-approval for bootstrappers, certificate rotation for nodes,
// and the public cluster-info ConfigMap used for token discovery.
func kubeadmObjects(server string, caPEM []byte) ([]any, error) {
	clusterInfo, err := clientcmd.Write(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"": {Server: server, CertificateAuthorityData: caPEM}},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding cluster-info: %w", err)
	}
	bootstrappers := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: BootstrapperGroup}}
	binding := func(name, role string, subjects []rbacv1.Subject) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subjects,
		}
	}
	return []any{
		binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", bootstrappers),
		binding("kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrappers),
		binding("kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
			[]rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}}),
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}},
		},
		binding("kubeadm:get-nodes", "kubeadm:get-nodes", bootstrappers),
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "cluster-info"},
			Data:       map[string]string{"kubeconfig": string(clusterInfo)},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "kubeadm:bootstrap-signer-clusterinfo"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
				ResourceNames: []string{"cluster-info"}, Verbs: []string{"get"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "kubeadm:bootstrap-signer-clusterinfo"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:bootstrap-signer-clusterinfo"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:anonymous"}},
		},
	}, nil
}

// applyKubeadmObjects creates the objects of kubeadmObjects, leaving existing ones alone.
func applyKubeadmObjects(ctx context.Context, cs kubernetes.Interface, server string, caPEM []byte) error {
	objs, err := kubeadmObjects(server, caPEM)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unexpected object %T", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating kubeadm object %T: %w", obj, err)
		}
	}
	return nil
}
