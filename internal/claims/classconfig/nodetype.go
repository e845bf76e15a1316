// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// RegistrationWindow is Karpenter's fixed time from claim creation to a registered Node.
const RegistrationWindow = v1alpha1.RegistrationWindow

// NodeLabels are the labels a node of this fulfillment carries.
func NodeLabels(nt *v1alpha1.NodeType, f *v1alpha1.Fulfillment) map[string]string {
	labels := map[string]string{
		corev1.LabelInstanceTypeStable: nt.Name,
		corev1.LabelTopologyZone:       f.Spec.Zone,
		karpv1.CapacityTypeLabelKey:    f.Spec.CapacityType,
		corev1.LabelArchStable:         nt.ArchitectureOrDefault(),
		corev1.LabelOSStable:           string(corev1.Linux),
	}
	for k, v := range nt.Labels {
		labels[k] = v
	}
	return labels
}

// Reservations are what the type's kubelets keep from pods; Karpenter's instance type
// subtracts the same.
func Reservations(nt *v1alpha1.NodeType) bootstrap.Reservations {
	return bootstrap.Reservations{KubeReserved: nt.Overhead, SystemReserved: nt.SystemReserved, EvictionHard: nt.EvictionHard}
}

// ProviderIDSource is where a machine reads its provider ID when it is not known at render
// time (known is empty): the node type's providerIDFrom, with Hetzner Cloud's defaults.
func ProviderIDSource(nt *v1alpha1.NodeType, known string) *bootstrap.ProviderIDSource {
	if known != "" {
		return nil
	}
	from := nt.ProviderIDFromOrDefault()
	return &bootstrap.ProviderIDSource{URL: from.MetadataURL, Prefix: from.Prefix}
}

// RegistrationFit checks that a node type's apply deadline and join timeout fit Karpenter's
// fixed registration window; a type that does not is offered but not launchable.
func RegistrationFit(nt *v1alpha1.NodeType) (bool, string) {
	apply, join := nt.ApplyDeadline(), nt.JoinTimeoutOrDefault()
	if apply+join <= RegistrationWindow {
		return true, ""
	}
	return false, fmt.Sprintf("%s (apply %s + join %s = %s)", nt.Name, message.Duration(apply), message.Duration(join), message.Duration(apply+join))
}
