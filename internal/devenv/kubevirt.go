// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package devenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt/standin"
)

// The environment's KubeVirt infra cluster is its own API server: KubeVirt's CRDs, the
// simulated virt controller watching one namespace, and a service account there with the
// rights of examples/kubevirt/rbac-infra.yaml, whose token a class's credentials hold.
const (
	InfraNamespace      = "kubevirt-infra"
	InfraServiceAccount = "fulfiller"
	// InfraBootImage boots and joins; InfraMissingImage does not exist (pulling it fails).
	InfraBootImage    = "quay.io/containerdisks/ubuntu:24.04"
	InfraMissingImage = "quay.io/containerdisks/missing:1"
)

// InfraNodeCPU and InfraNodeMemory are the one simulated infra node's allocatable: a VM
// larger than it is unschedulable.
var (
	InfraNodeCPU    = resource.MustParse("16")
	InfraNodeMemory = resource.MustParse("16Gi")
)

func (l Layout) InfraMachines() string { return filepath.Join(l.Dir, "kubevirt-machines") }

// startKubeVirt creates the infra namespace and service account and runs the simulated virt
// controller until ctx ends; the returned function waits for it to stop and powers off its
// guests.
func startKubeVirt(ctx context.Context, l Layout, cfg *rest.Config, cs kubernetes.Interface) (func(), error) {
	if err := infraRBAC(ctx, cs); err != nil {
		return nil, err
	}
	machines := &standin.SimMachines{Dir: l.InfraMachines(), HeartbeatInterval: 2 * time.Second, StopGrace: 5 * time.Second}
	c, err := standin.New(cfg, standin.Config{
		Namespace: InfraNamespace,
		Nodes: []standin.Node{{Name: "infra-1", Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: InfraNodeCPU, corev1.ResourceMemory: InfraNodeMemory,
		}}},
		Images:   map[string]standin.Guest{InfraBootImage: standin.GuestBoots},
		Machines: machines,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "the simulated virt controller:", err)
		}
	}()
	return func() {
		cancel()
		<-done
		entries, _ := os.ReadDir(filepath.Join(machines.Dir, InfraNamespace))
		for _, e := range entries {
			_ = machines.PowerOff(context.Background(), types.NamespacedName{Namespace: InfraNamespace, Name: e.Name()}, true)
		}
	}, nil
}

// infraRBAC: the infra namespace and its service account with the rights the module and the
// KubeVirt family need there (examples/kubevirt/rbac-infra.yaml).
func infraRBAC(ctx context.Context, cs kubernetes.Interface) error {
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: InfraNamespace, Name: "fulfiller-vms"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: InfraNamespace, Name: "fulfiller-vms"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: InfraServiceAccount, Namespace: InfraNamespace}},
	}
	for _, create := range []func() error{
		func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: InfraNamespace}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(InfraNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: InfraServiceAccount}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().Roles(InfraNamespace).Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().RoleBindings(InfraNamespace).Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the kubevirt infra namespace: %w", err)
		}
	}
	return nil
}
