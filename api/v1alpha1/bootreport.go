// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BootReport is where a claim's machine says how its boot goes, before it has a Node: the
// stage it reached and, when a step failed, the step and the line that says why. The
// controller creates one per claim (same name, in its own namespace, owned by the claim's
// Fulfillment) with the ID of the claim's bootstrap token; the machine patches its status
// with that token, which may patch a BootReport's status and nothing else, and only this one
// (the chart's RBAC and ValidatingAdmissionPolicy; docs/node-bootstrap.md). The Fulfillment's
// Joined condition shows what it says.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fulfiller
// +kubebuilder:printcolumn:name="Stage",type=string,JSONPath=`.status.stage`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.step`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
type BootReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BootReportSpec   `json:"spec"`
	Status BootReportStatus `json:"status,omitempty"`
}

// BootReportSpec says who may report.
type BootReportSpec struct {
	// TokenID is the ID of the claim's bootstrap token: only system:bootstrap:<tokenID> may
	// write the status. It cannot change.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]{6}$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tokenID is immutable"
	TokenID string `json:"tokenID"`
}

// The stages a machine reports.
const (
	// BootStageInstalling: the machine installs its node software (bootstrap.install
	// packages).
	BootStageInstalling = "Installing"
	// BootStageJoining: the machine runs kubeadm join.
	BootStageJoining = "Joining"
	// BootStageFailed: a step failed; the machine stopped before joining.
	BootStageFailed = "Failed"
)

// BootReportStatus is the machine's own account of its boot.
type BootReportStatus struct {
	// Stage the machine reached: Installing, Joining or Failed.
	// +kubebuilder:validation:Enum=Installing;Joining;Failed
	// +optional
	Stage string `json:"stage,omitempty"`
	// Step being run, or the one that failed (install.sh's steps, provider-id, join).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]*$`
	// +optional
	Step string `json:"step,omitempty"`
	// Message of a failed step: the last line of the failing command.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// BootReportList is a list of BootReports.
// +kubebuilder:object:root=true
type BootReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BootReport `json:"items"`
}
