// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// Gate kinds, also the `gate` label of the metrics.
const (
	gateCNI    = "cni"
	gateGPU    = "gpu"
	gateCustom = "custom"
)

// gate is one readiness gate of a node type: a taint the machine registers with, the check
// that removes it, and how long the check may take from registration.
type gate struct {
	kind      string
	name      string // the custom gate's name; the kind otherwise
	taint     string
	condition string
	deadline  time.Duration
	// waitReason is the condition's reason while the gate waits within its deadline;
	// failReason once the deadline passed.
	waitReason, failReason string
	custom                 *v1alpha1.CustomGate
}

// gatesFor lists the readiness gates of a node type, in the order their conditions roll up.
func gatesFor(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) []gate {
	var out []gate
	r := &nc.Spec.Readiness
	if !r.CNI.Disabled {
		out = append(out, gate{kind: gateCNI, name: gateCNI, taint: v1alpha1.TaintCNI, condition: v1alpha1.ConditionCNIReady,
			deadline: nt.CNIDeadline(), waitReason: v1alpha1.ReasonAwaitingCNI, failReason: v1alpha1.ReasonCNINotReady})
	}
	if !r.GPU.Disabled && len(gpuResources(nt)) > 0 {
		out = append(out, gate{kind: gateGPU, name: gateGPU, taint: v1alpha1.TaintGPU, condition: v1alpha1.ConditionGPUReady,
			deadline: nt.GPUDeadline(), waitReason: v1alpha1.ReasonAwaitingGPU, failReason: v1alpha1.ReasonGPUNotRegistered})
	}
	for i := range r.Custom {
		c := &r.Custom[i]
		out = append(out, gate{kind: gateCustom, name: c.Name, taint: v1alpha1.TaintCustomPrefix + c.Name, condition: v1alpha1.ConditionGatesReady,
			deadline: nt.CustomDeadline(), waitReason: v1alpha1.ReasonAwaitingCustom, failReason: v1alpha1.ReasonCustomGateNotMet, custom: c})
	}
	return out
}

// GateTaints are the NoSchedule taints a machine of the node type registers with, one per
// readiness gate.
func GateTaints(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) []corev1.Taint {
	var out []corev1.Taint
	for _, g := range gatesFor(nc, nt) {
		out = append(out, corev1.Taint{Key: g.taint, Effect: corev1.TaintEffectNoSchedule})
	}
	return out
}

// gpuResources are the extended resources of the node type's capacity (nvidia.com/gpu,
// amd.com/gpu, ...): everything with a domain outside kubernetes.io.
func gpuResources(nt *v1alpha1.NodeType) corev1.ResourceList {
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

// gateObservation is what was read about one gate's check.
type gateObservation struct {
	// passed: the check holds now.
	passed bool
	// reason overrides the gate's failReason when set (e.g. a missing GPU validator label).
	reason string
	// detail says what is missing, e.g. "nvidia.com/gpu allocatable 0 of 1".
	detail string
}

// checkCNI: the node is Ready, NetworkUnavailable is not True and, when a DaemonSet is named,
// its pod on the node is Ready (dsPodReady; nil when none is named).
func checkCNI(node *corev1.Node, ds *v1alpha1.ObjectRef, dsPodReady *bool) gateObservation {
	ready := nodeCondition(node, corev1.NodeReady)
	switch {
	case ready == nil:
		return gateObservation{detail: "node reports no Ready condition"}
	case ready.Status != corev1.ConditionTrue:
		return gateObservation{detail: fmt.Sprintf("node Ready is %s (%s)", ready.Status, ready.Reason)}
	}
	if c := nodeCondition(node, corev1.NodeNetworkUnavailable); c != nil && c.Status == corev1.ConditionTrue {
		return gateObservation{detail: fmt.Sprintf("node NetworkUnavailable is True (%s)", c.Reason)}
	}
	if ds != nil && (dsPodReady == nil || !*dsPodReady) {
		return gateObservation{detail: fmt.Sprintf("daemonset %s/%s has no Ready pod on the node", ds.Namespace, ds.Name)}
	}
	return gateObservation{passed: true}
}

// checkGPU: every GPU resource of the node type is fully allocatable, and the validator label
// is there when one is named.
func checkGPU(node *corev1.Node, want corev1.ResourceList, validator *v1alpha1.LabelMatch) gateObservation {
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		q := want[corev1.ResourceName(name)]
		have := node.Status.Allocatable[corev1.ResourceName(name)]
		if have.Cmp(q) < 0 {
			return gateObservation{detail: fmt.Sprintf("%s allocatable %s of %s", name, have.String(), q.String())}
		}
	}
	if validator != nil && !labelMatches(node, validator) {
		return gateObservation{reason: v1alpha1.ReasonGPUNotValidated, detail: "validator label " + labelString(validator) + " missing"}
	}
	return gateObservation{passed: true}
}

// checkCustom: the gate's node condition has the wanted status, or its label is there.
func checkCustom(node *corev1.Node, g *v1alpha1.CustomGate) gateObservation {
	switch {
	case g.NodeCondition != nil:
		want := corev1.ConditionStatus(g.NodeCondition.StatusOrDefault())
		c := nodeCondition(node, corev1.NodeConditionType(g.NodeCondition.Type))
		if c == nil {
			return gateObservation{detail: fmt.Sprintf("gate %s: node has no %s condition", g.Name, g.NodeCondition.Type)}
		}
		if c.Status != want {
			return gateObservation{detail: fmt.Sprintf("gate %s: node condition %s is %s, want %s", g.Name, c.Type, c.Status, want)}
		}
	case g.Label != nil:
		if !labelMatches(node, g.Label) {
			return gateObservation{detail: fmt.Sprintf("gate %s: label %s missing", g.Name, labelString(g.Label))}
		}
	}
	return gateObservation{passed: true}
}

// gateDecision is what to do about one gate now.
type gateDecision struct {
	open bool
	// status of the gate: True (open), Unknown (waiting within its deadline) or False
	// (deadline passed).
	status metav1.ConditionStatus
	reason string
	// message explains the status.
	message string
	// requeue is when to look again while the gate is closed.
	requeue time.Duration
}

// decideGate decides a gate from its observation and how long the node has been registered.
func decideGate(g gate, obs gateObservation, waited time.Duration) gateDecision {
	if obs.passed {
		return gateDecision{open: true, status: metav1.ConditionTrue, reason: v1alpha1.ReasonGateOpen, message: g.name + " gate open after " + shortDuration(waited)}
	}
	if waited < g.deadline {
		return gateDecision{status: metav1.ConditionUnknown, reason: g.waitReason,
			message: obs.detail, requeue: min(5*time.Second, g.deadline-waited)}
	}
	reason := g.failReason
	if obs.reason != "" {
		reason = obs.reason
	}
	return gateDecision{status: metav1.ConditionFalse, reason: reason, message: obs.detail + " after " + shortDuration(g.deadline), requeue: 30 * time.Second}
}

// rollUp combines the decisions of the gates behind one condition: False when one missed its
// deadline, Unknown while one waits, True once all are open. It returns the decision that
// speaks for the condition.
func rollUp(ds []gateDecision) gateDecision {
	var waiting *gateDecision
	for i := range ds {
		switch ds[i].status {
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
		msgs = append(msgs, d.message)
	}
	return gateDecision{open: true, status: metav1.ConditionTrue, reason: v1alpha1.ReasonGateOpen, message: strings.Join(msgs, "; ")}
}

// staleGateTaints are our readiness taints on the node that no declared gate owns (a gate
// removed from the NodeClass after the node registered): they would never be removed.
func staleGateTaints(node *corev1.Node, gates []gate) []string {
	var out []string
	for _, t := range node.Spec.Taints {
		if !strings.HasPrefix(t.Key, v1alpha1.ReadinessTaintPrefix+"fulfiller.sh-") {
			continue
		}
		owned := false
		for _, g := range gates {
			owned = owned || g.taint == t.Key
		}
		if !owned {
			out = append(out, t.Key)
		}
	}
	return out
}

func hasTaint(node *corev1.Node, key string) bool {
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

// shortDuration prints 10m rather than 10m0s.
func shortDuration(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// registrationFit checks that a node type's apply deadline and join timeout fit Karpenter's
// fixed registration window; a type that does not is offered but not launchable.
func registrationFit(nt *v1alpha1.NodeType) (bool, string) {
	apply, join := nt.ApplyDeadline(), nt.JoinTimeoutOrDefault()
	if apply+join <= registrationWindow {
		return true, ""
	}
	return false, fmt.Sprintf("%s (apply %s + join %s = %s)", nt.Name, shortDuration(apply), shortDuration(join), shortDuration(apply+join))
}
