// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Readiness gates. A machine registers its Node with one NoSchedule taint per gate, keyed
// under `readiness.k8s.io/` — the prefix Karpenter core treats as a known ephemeral taint: it
// keeps the NodeClaim from being Initialized while such a taint is on, and its scheduler does
// not count the taint against pending pods (so no second node is launched for them). The
// fulfiller removes each taint once the gate's check passes.
const (
	// ReadinessTaintPrefix is the prefix of every readiness gate taint.
	ReadinessTaintPrefix = "readiness.k8s.io/"
	// TaintCNI gates on the node's network: Ready, NetworkUnavailable not True, and
	// optionally a named DaemonSet's pod Ready on the node.
	TaintCNI = ReadinessTaintPrefix + "fulfiller.sh-cni"
	// TaintGPU gates on the node type's GPU resources being fully allocatable.
	TaintGPU = ReadinessTaintPrefix + "fulfiller.sh-gpu"
	// TaintCustomPrefix + a custom gate's name is that gate's taint.
	TaintCustomPrefix = ReadinessTaintPrefix + "fulfiller.sh-gate-"
)

// GatePolicy says what happens to a node whose readiness gate missed its deadline.
// +kubebuilder:validation:Enum=ReportOnly;Replace
type GatePolicy string

const (
	// GatePolicyReportOnly keeps the node (tainted, so no pod lands on it); the Fulfillment's
	// condition, an event and a metric say why. The gate still opens if its check passes later.
	GatePolicyReportOnly GatePolicy = "ReportOnly"
	// GatePolicyReplace deletes the NodeClaim: Karpenter plans again and the machine is
	// destroyed.
	GatePolicyReplace GatePolicy = "Replace"
)

// ReadinessSpec declares the gates a node passes before pods may land on it.
type ReadinessSpec struct {
	// CNI gate: on unless disabled.
	// +optional
	CNI CNIGate `json:"cni,omitempty"`
	// GPU gate: applies to node types whose capacity declares an extended resource (such as
	// nvidia.com/gpu), unless disabled.
	// +optional
	GPU GPUGate `json:"gpu,omitempty"`
	// Custom gates, each a node condition or a label to wait for.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Custom []CustomGate `json:"custom,omitempty"`
	// Policy on a missed deadline: ReportOnly (keep the node, say why; the default) or Replace
	// (replace the claim).
	// +optional
	Policy GatePolicy `json:"policy,omitempty"`
}

type CNIGate struct {
	// Disabled turns the CNI gate off: nodes register without its taint.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// DaemonSet, when set, must have a Ready pod on the node (e.g. kube-system/cilium).
	// +optional
	DaemonSet *ObjectRef `json:"daemonSet,omitempty"`
}

type ObjectRef struct {
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

type GPUGate struct {
	// Disabled turns the GPU gate off.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// ValidatorLabel, when set, must be on the node too (e.g. the NVIDIA operator's
	// nvidia.com/gpu.deploy.operator-validator=true).
	// +optional
	ValidatorLabel *LabelMatch `json:"validatorLabel,omitempty"`
}

type LabelMatch struct {
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
	// Value the label must have; any value when empty.
	// +optional
	Value string `json:"value,omitempty"`
}

// CustomGate waits for a node condition or a label; exactly one of them is set.
// +kubebuilder:validation:XValidation:rule="has(self.nodeCondition) != has(self.label)",message="a custom gate sets exactly one of nodeCondition and label"
type CustomGate struct {
	// Name of the gate; its taint is readiness.k8s.io/fulfiller.sh-gate-<name>.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=40
	Name string `json:"name"`
	// +optional
	NodeCondition *NodeConditionMatch `json:"nodeCondition,omitempty"`
	// +optional
	Label *LabelMatch `json:"label,omitempty"`
}

type NodeConditionMatch struct {
	// +kubebuilder:validation:MinLength=1
	Type string `json:"type"`
	// Status the condition must have; default True.
	// +kubebuilder:validation:Enum=True;False;Unknown
	// +optional
	Status string `json:"status,omitempty"`
}

// StageDeadlines bound each stage of a node type's claims. Apply and join must together fit
// Karpenter's fixed 15-minute registration window, or the type is not launchable; the gate
// deadlines count from the Node's registration.
type StageDeadlines struct {
	// Apply is how long one apply of the module may take: at it the runner interrupts tofu,
	// which releases its state lock, and the run fails with class Timeout (a runner Job's
	// activeDeadlineSeconds is this plus the grace period, as a backstop). Together with
	// joinTimeout it must fit Karpenter's registration window. Default 4m.
	// +optional
	Apply *metav1.Duration `json:"apply,omitempty"`
	// CNI gate deadline from registration. Default 5m.
	// +optional
	CNI *metav1.Duration `json:"cni,omitempty"`
	// GPU gate deadline from registration. Default 10m.
	// +optional
	GPU *metav1.Duration `json:"gpu,omitempty"`
	// Custom gates' deadline from registration. Default 10m.
	// +optional
	Custom *metav1.Duration `json:"custom,omitempty"`
}

// KubeletArg is one kubelet flag, without the leading dashes.
type KubeletArg struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9][-a-z0-9]*$`
	Name string `json:"name"`
	// +optional
	Value string `json:"value,omitempty"`
}
