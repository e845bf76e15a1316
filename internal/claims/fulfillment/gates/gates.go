// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package gates holds the readiness gates' pure decisions: which gates a node type has (each a
// taint the machine registers with), what one gate's check observes on the Node, what to do
// about it given how long the node has been registered, and how the gates behind one
// condition roll up. The Fulfillment's gate stage gathers and acts; nothing here reads or
// writes.
package gates

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// Gate kinds, also the `gate` label of the metrics.
const (
	KindCNI    = "cni"
	KindGPU    = "gpu"
	KindCustom = "custom"
)

// Gate is one readiness gate of a node type: a taint the machine registers with, the check
// that removes it, and how long the check may take from registration.
type Gate struct {
	Kind      string
	Name      string // the custom gate's name; the kind otherwise
	Taint     string
	Condition string
	Deadline  time.Duration
	// WaitReason is the condition's reason while the gate waits within its deadline;
	// FailReason once the deadline passed.
	WaitReason, FailReason string
	Custom                 *v1alpha1.CustomGate
}

// For lists the readiness gates of a node type, in the order their conditions roll up.
func For(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) []Gate {
	var out []Gate
	r := &nc.Spec.Readiness
	if !r.CNI.Disabled {
		out = append(out, Gate{Kind: KindCNI, Name: KindCNI, Taint: v1alpha1.TaintCNI, Condition: v1alpha1.ConditionCNIReady,
			Deadline: nt.CNIDeadline(), WaitReason: v1alpha1.ReasonAwaitingCNI, FailReason: v1alpha1.ReasonCNINotReady})
	}
	if !r.GPU.Disabled && len(GPUResources(nt)) > 0 {
		out = append(out, Gate{Kind: KindGPU, Name: KindGPU, Taint: v1alpha1.TaintGPU, Condition: v1alpha1.ConditionGPUReady,
			Deadline: nt.GPUDeadline(), WaitReason: v1alpha1.ReasonAwaitingGPU, FailReason: v1alpha1.ReasonGPUNotRegistered})
	}
	for i := range r.Custom {
		c := &r.Custom[i]
		out = append(out, Gate{Kind: KindCustom, Name: c.Name, Taint: v1alpha1.TaintCustomPrefix + c.Name, Condition: v1alpha1.ConditionGatesReady,
			Deadline: nt.CustomDeadline(), WaitReason: v1alpha1.ReasonAwaitingCustom, FailReason: v1alpha1.ReasonCustomGateNotMet, Custom: c})
	}
	return out
}

// Taints are the NoSchedule taints a machine of the node type registers with, one per
// readiness gate.
func Taints(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) []corev1.Taint {
	var out []corev1.Taint
	for _, g := range For(nc, nt) {
		out = append(out, corev1.Taint{Key: g.Taint, Effect: corev1.TaintEffectNoSchedule})
	}
	return out
}

// GPUResources are the extended resources of the node type's capacity (nvidia.com/gpu,
// amd.com/gpu, ...): everything with a domain outside kubernetes.io.
func GPUResources(nt *v1alpha1.NodeType) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range nt.Capacity {
		domain, _, ok := strings.Cut(string(name), "/")
		if !ok || domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") || q.IsZero() {
			continue
		}
		out[name] = q
	}
	return out
}

// Observation is what was read about one gate's check.
type Observation struct {
	// Passed: the check holds now.
	Passed bool
	// Reason overrides the gate's FailReason when set (e.g. a missing GPU validator label).
	Reason string
	// Detail says what is missing, e.g. "nvidia.com/gpu allocatable 0 of 1".
	Detail string
}

// CheckCNI: the node is Ready, NetworkUnavailable is not True and, when a DaemonSet is named,
// its pod on the node is Ready (dsPodReady; nil when none is named).
func CheckCNI(node *corev1.Node, ds *v1alpha1.ObjectRef, dsPodReady *bool) Observation {
	ready := nodeCondition(node, corev1.NodeReady)
	switch {
	case ready == nil:
		return Observation{Detail: "node reports no Ready condition"}
	case ready.Status != corev1.ConditionTrue:
		return Observation{Detail: fmt.Sprintf("node Ready is %s (%s)", ready.Status, ready.Reason)}
	}
	if c := nodeCondition(node, corev1.NodeNetworkUnavailable); c != nil && c.Status == corev1.ConditionTrue {
		return Observation{Detail: fmt.Sprintf("node NetworkUnavailable is True (%s)", c.Reason)}
	}
	if ds != nil && (dsPodReady == nil || !*dsPodReady) {
		return Observation{Detail: fmt.Sprintf("daemonset %s/%s has no Ready pod on the node", ds.Namespace, ds.Name)}
	}
	return Observation{Passed: true}
}

// CheckGPU: every GPU resource of the node type is fully allocatable, and the validator label
// is there when one is named.
func CheckGPU(node *corev1.Node, want corev1.ResourceList, validator *v1alpha1.LabelMatch) Observation {
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		q := want[corev1.ResourceName(name)]
		have := node.Status.Allocatable[corev1.ResourceName(name)]
		if have.Cmp(q) < 0 {
			return Observation{Detail: fmt.Sprintf("%s allocatable %s of %s", name, have.String(), q.String())}
		}
	}
	if validator != nil && !labelMatches(node, validator) {
		return Observation{Reason: v1alpha1.ReasonGPUNotValidated, Detail: "validator label " + labelString(validator) + " missing"}
	}
	return Observation{Passed: true}
}

// CheckCustom: the gate's node condition has the wanted status, or its label is there.
func CheckCustom(node *corev1.Node, g *v1alpha1.CustomGate) Observation {
	switch {
	case g.NodeCondition != nil:
		want := corev1.ConditionStatus(g.NodeCondition.StatusOrDefault())
		c := nodeCondition(node, corev1.NodeConditionType(g.NodeCondition.Type))
		if c == nil {
			return Observation{Detail: fmt.Sprintf("gate %s: node has no %s condition", g.Name, g.NodeCondition.Type)}
		}
		if c.Status != want {
			return Observation{Detail: fmt.Sprintf("gate %s: node condition %s is %s, want %s", g.Name, c.Type, c.Status, want)}
		}
	case g.Label != nil:
		if !labelMatches(node, g.Label) {
			return Observation{Detail: fmt.Sprintf("gate %s: label %s missing", g.Name, labelString(g.Label))}
		}
	}
	return Observation{Passed: true}
}

// Decision is what to do about one gate now.
type Decision struct {
	Open bool
	// Status of the gate: True (open), Unknown (waiting within its deadline) or False
	// (deadline passed).
	Status metav1.ConditionStatus
	Reason string
	// Message explains the status.
	Message string
	// Requeue is when to look again while the gate is closed.
	Requeue time.Duration
}

// Decide decides a gate from its observation and how long the node has been registered.
func Decide(g Gate, obs Observation, waited time.Duration) Decision {
	if obs.Passed {
		return Decision{Open: true, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonGateOpen, Message: g.Name + " gate open after " + message.Duration(waited)}
	}
	if waited < g.Deadline {
		return Decision{Status: metav1.ConditionUnknown, Reason: g.WaitReason,
			Message: obs.Detail, Requeue: min(5*time.Second, g.Deadline-waited)}
	}
	reason := g.FailReason
	if obs.Reason != "" {
		reason = obs.Reason
	}
	return Decision{Status: metav1.ConditionFalse, Reason: reason, Message: obs.Detail + " after " + message.Duration(g.Deadline), Requeue: 30 * time.Second}
}

// RollUp combines the decisions of the gates behind one condition: False when one missed its
// deadline, Unknown while one waits, True once all are open. It returns the decision that
// speaks for the condition.
func RollUp(ds []Decision) Decision {
	var waiting *Decision
	for i := range ds {
		switch ds[i].Status {
		case metav1.ConditionFalse:
			return ds[i]
		case metav1.ConditionUnknown:
			if waiting == nil {
				waiting = &ds[i]
			}
		}
	}
	if waiting != nil {
		return *waiting
	}
	msgs := make([]string, 0, len(ds))
	for _, d := range ds {
		msgs = append(msgs, d.Message)
	}
	return Decision{Open: true, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonGateOpen, Message: strings.Join(msgs, "; ")}
}

// StaleTaints are our readiness taints on the node that no declared gate owns (a gate
// removed from the NodeClass after the node registered): they would never be removed.
func StaleTaints(node *corev1.Node, gates []Gate) []string {
	var out []string
	for _, t := range node.Spec.Taints {
		if !strings.HasPrefix(t.Key, v1alpha1.ReadinessTaintPrefix+"fulfiller.sh-") {
			continue
		}
		owned := false
		for _, g := range gates {
			owned = owned || g.Taint == t.Key
		}
		if !owned {
			out = append(out, t.Key)
		}
	}
	return out
}

func HasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func nodeCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func labelMatches(node *corev1.Node, l *v1alpha1.LabelMatch) bool {
	v, ok := node.Labels[l.Key]
	return ok && (l.Value == "" || v == l.Value)
}

func labelString(l *v1alpha1.LabelMatch) string {
	if l.Value == "" {
		return l.Key
	}
	return l.Key + "=" + l.Value
}
