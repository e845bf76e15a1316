// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// SettingsFor are the run settings of a claim of class nc and node type nt (either may be
// nil: a class gone), recorded by Create: the backend with its namespace resolved
// (stateNamespace when the class names none), the credentials, the module's parameters and
// labels, and the apply deadline.
func SettingsFor(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType, f *v1alpha1.Fulfillment, stateNamespace string) *v1alpha1.RunSettings {
	out := &v1alpha1.RunSettings{Parameters: map[string]string{}, Labels: map[string]string{}}
	if nc != nil {
		out.Backend = *nc.Spec.Backend.DeepCopy()
		out.Credentials = append([]v1alpha1.CredentialsSource(nil), nc.Spec.Credentials...)
		maps.Copy(out.Parameters, nc.Spec.Variables)
	}
	if out.Backend.Type == "" {
		out.Backend.Type = out.Backend.TypeOrDefault()
	}
	out.Backend.Namespace = StateNamespace(out.Backend, stateNamespace)
	if pg := out.Backend.PG; pg != nil && pg.SchemaName == "" {
		pg.SchemaName = out.Backend.PGSchema()
	}
	if enc := out.Backend.Encryption; enc != nil && enc.Method == "" {
		enc.Method = enc.MethodOrDefault()
	}
	deadline := v1alpha1.DefaultApplyDeadline
	if nt != nil {
		maps.Copy(out.Parameters, nt.Variables)
		out.Labels = NodeLabels(nt, f)
		deadline = nt.ApplyDeadline()
	}
	if f.Spec.NodePool != "" {
		// For the module to label what it creates with the NodePool.
		out.Labels[karpv1.NodePoolLabelKey] = f.Spec.NodePool
	}
	out.ApplyDeadline = durationPtr(deadline)
	return out
}

// RunSettings are what the claim's runs use: as Create recorded them, or, for a Fulfillment
// made before they were recorded, from its class and node type as they are now (either may be
// nil), with stateNamespace for a class that names none.
func RunSettings(f *v1alpha1.Fulfillment, nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType, stateNamespace string) *v1alpha1.RunSettings {
	if f.Spec.Settings != nil {
		return f.Spec.Settings
	}
	return SettingsFor(nc, nt, f, stateNamespace)
}

func durationPtr(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// StateNamespace is where the states of a backend live (kubernetes backend): the namespace it
// names, or stateNamespace, the controller's, when it names none.
func StateNamespace(b v1alpha1.Backend, stateNamespace string) string {
	if b.Namespace != "" {
		return b.Namespace
	}
	return stateNamespace
}
