// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package v1alpha1 holds the fulfiller.sh/v1alpha1 API: TofuNodeClass, what a NodePool's
// nodeClassRef names; Fulfillment, the durable record of one NodeClaim's fulfilment; and
// BootReport, where a claim's machine reports its boot.
// +kubebuilder:object:generate=true
// +groupName=fulfiller.sh
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// Group is the API group of the fulfiller's resources.
const Group = "fulfiller.sh"

var (
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}
	SchemeBuilder      = runtime.NewSchemeBuilder(addKnownTypes)
	AddToScheme        = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion,
		&TofuNodeClass{}, &TofuNodeClassList{},
		&Fulfillment{}, &FulfillmentList{},
		&BootReport{}, &BootReportList{},
	)
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Karpenter resolves NodeClass kinds through client-go's global scheme (operatorpkg's
// object.GVK), so the types are registered there too.
func init() {
	if err := AddToScheme(scheme.Scheme); err != nil {
		panic(err)
	}
}
