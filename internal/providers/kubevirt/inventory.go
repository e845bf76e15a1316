// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// providerIDPrefix starts the provider ID of a KubeVirt node (modules/kubevirt's provider_id).
const providerIDPrefix = "kubevirt://"

// namespaces are the VM namespaces of the class's node types, sorted.
func namespaces(nc *v1alpha1.TofuNodeClass) []string {
	seen := map[string]bool{}
	if ns := nc.Spec.Variables[paramNamespace]; ns != "" {
		seen[ns] = true
	}
	for _, nt := range nc.Spec.NodeTypes {
		if ns := parameters(nc, nt.Name)[paramNamespace]; ns != "" {
			seen[ns] = true
		}
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// List lists the VirtualMachines labelled as this cluster's (keys.LabelCluster) in the
// class's VM namespaces (family.Machines). Without a cluster name nothing can be
// attributed: an error.
func (f *Family) List(ctx context.Context, s family.Scope) ([]family.Machine, error) {
	if s.Cluster == "" {
		return nil, errors.New("no cluster name: the machines of this cluster cannot be told apart")
	}
	c, _, err := f.infra.forScope(s, "")
	if err != nil {
		return nil, err
	}
	var out []family.Machine
	for _, ns := range namespaces(s.Class) {
		list := &virtv1.VirtualMachineList{}
		if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{keys.LabelCluster: s.Cluster}); err != nil {
			return nil, fmt.Errorf("listing virtualmachines in %s: %w", ns, err)
		}
		for i := range list.Items {
			out = append(out, machine(&list.Items[i]))
		}
	}
	return out, nil
}

func machine(vm *virtv1.VirtualMachine) family.Machine {
	l := vm.Labels
	return family.Machine{
		ID: vm.Namespace + "/" + vm.Name, Name: vm.Name, ProviderID: providerIDPrefix + vm.Name,
		Cluster: l[keys.LabelCluster], Claim: l[keys.LabelNodeClaim], Class: l[keys.LabelNodeClass], NodePool: l[keys.LabelNodePool],
		// The API server keeps creationTimestamp to the second.
		Created: family.LatestWithin(vm.CreationTimestamp.Time, time.Second),
	}
}

// Delete deletes a VM of List, if it is still this cluster's and the same VM (its UID
// precondition), with foreground propagation (its VMI and DataVolumes first), and its
// cloud-init Secret. A VM already gone is no error.
func (f *Family) Delete(ctx context.Context, s family.Scope, m family.Machine) error {
	ns, name, ok := splitID(m.ID)
	if !ok {
		return fmt.Errorf("machine id %q is not <namespace>/<name>", m.ID)
	}
	if s.Cluster == "" {
		return errors.New("no cluster name: the machines of this cluster cannot be told apart")
	}
	c, _, err := f.infra.forScope(s, "")
	if err != nil {
		return err
	}
	vm := &virtv1.VirtualMachine{}
	switch err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vm); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading virtualmachine %s: %w", m.ID, err)
	}
	if vm.Labels[keys.LabelCluster] != s.Cluster {
		return fmt.Errorf("virtualmachine %s is not labelled as cluster %s's", m.ID, s.Cluster)
	}
	err = c.Delete(ctx, vm, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &vm.UID})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting virtualmachine %s: %w", m.ID, err)
	}
	secret := &corev1.Secret{}
	switch err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-userdata"}, secret); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading the cloud-init secret of %s: %w", m.ID, err)
	}
	if secret.Labels[keys.LabelCluster] != s.Cluster {
		return nil
	}
	if err := c.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the cloud-init secret of %s: %w", m.ID, err)
	}
	return nil
}

func splitID(id string) (string, string, bool) {
	ns, name, ok := strings.Cut(id, "/")
	return ns, name, ok && ns != "" && name != ""
}
