// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/gates"
)

// gateStage opens the node's readiness gates: once a gate's check passes, its
// readiness.k8s.io/ taint is removed from the Node (Karpenter initializes the claim only when
// none is left). A gate that misses its deadline turns its condition False with a precise
// reason, an event and a metric, and the NodeClass's policy decides: keep the node
// (ReportOnly; the gate still opens if the check passes later) or replace the claim.
type gateStage struct {
	kube  client.Client
	clock clock.Clock
}

// gateConditions are the conditions of the gates, each with the stage time it stamps.
var gateConditions = []string{v1alpha1.ConditionCNIReady, v1alpha1.ConditionGPUReady, v1alpha1.ConditionGatesReady}

func (g *gateStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if !s.Conds.IsTrue(v1alpha1.ConditionJoined) || s.Class == nil || s.NodeType == nil || s.F.Status.NodeName == "" || s.F.Status.Stages.Registered == nil {
		return reconcile.Result{}, nil
	}
	node := &corev1.Node{}
	if err := g.kube.Get(ctx, client.ObjectKey{Name: s.F.Status.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading node: %w", err)
	}
	gs := gates.For(s.Class, s.NodeType)
	// Taken before any taint is removed: a gate's stage time is never after a pod that the
	// open gate let in was scheduled.
	now := g.clock.Now()
	waited := now.Sub(s.F.Status.Stages.Registered.Time)
	decisions := map[string][]gates.Decision{}
	remove := gates.StaleTaints(node, gs)
	var result reconcile.Result
	for _, gt := range gs {
		var d gates.Decision
		if !gates.HasTaint(node, gt.Taint) {
			d = gates.Decision{Open: true, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonGateOpen, Message: gt.Name + " gate open"}
			if c := s.Conds.Get(gt.Condition); c != nil && c.IsTrue() {
				d.Message = c.Message
			}
		} else {
			obs, err := g.observe(ctx, s, gt, node)
			if err != nil {
				return reconcile.Result{}, err
			}
			d = gates.Decide(gt, obs, waited)
			if d.Open {
				remove = append(remove, gt.Taint)
			}
		}
		decisions[gt.Condition] = append(decisions[gt.Condition], d)
		if d.Requeue > 0 {
			result = mergeResults(result, reconcile.Result{RequeueAfter: d.Requeue})
		}
	}
	if len(remove) > 0 {
		if err := g.removeTaints(ctx, node, remove); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
			}
			return reconcile.Result{}, err
		}
		log.FromContext(ctx).Info("opened readiness gates", "node", node.Name, "taints", remove)
	}
	policy := s.Class.Spec.Readiness.PolicyOrDefault()
	for _, cond := range gateConditions {
		ds, ok := decisions[cond]
		if !ok {
			if s.Conds.Get(cond) == nil || !s.Conds.IsTrue(cond) {
				s.Conds.SetTrueWithReason(cond, v1alpha1.ReasonGateNotApplicable, "no such gate for node type "+s.NodeType.Name)
			}
			continue
		}
		g.apply(s, cond, gates.RollUp(ds), policy, now, waited)
	}
	return result, nil
}

// apply records one condition's decision: stage time, metric and event on a change.
func (g *gateStage) apply(s *claimState, cond string, d gates.Decision, policy v1alpha1.GatePolicy, now time.Time, waited time.Duration) {
	before := s.Conds.Get(cond)
	kind := gateKindOf(cond)
	labels := claimLabels(s.F, classFamily(s))
	switch d.Status {
	case metav1.ConditionTrue:
		if before != nil && before.IsTrue() {
			return
		}
		s.Conds.SetTrueWithReason(cond, d.Reason, d.Message)
		opened := metav1.NewTime(now)
		setGateStage(&s.F.Status.Stages, cond, &opened)
		s.Events = append(s.Events, gateOpenedEvent(s.F, cond, d.Message))
		s.afterWrite = append(s.afterWrite, func() { gateDuration.With(with(labels, "gate", kind)).Observe(waited.Seconds()) })
	case metav1.ConditionUnknown:
		s.Conds.SetUnknownWithReason(cond, d.Reason, d.Message)
	case metav1.ConditionFalse:
		if before == nil || !before.IsFalse() || before.Reason != d.Reason {
			s.Events = append(s.Events, gateTimeoutEvent(s.F, d.Reason, d.Message, policy))
			if s.claim != nil {
				s.Events = append(s.Events, gateTimeoutEvent(s.claim, d.Reason, d.Message, policy))
			}
			s.afterWrite = append(s.afterWrite, func() { gateTimeouts.With(with(labels, "gate", kind, "policy", string(policy))).Inc() })
		}
		s.Conds.SetFalse(cond, d.Reason, d.Message)
		if policy == v1alpha1.GatePolicyReplace {
			s.Replace = true
		}
	}
}

// observe reads what one gate's check needs.
func (g *gateStage) observe(ctx context.Context, s *claimState, gt gates.Gate, node *corev1.Node) (gates.Observation, error) {
	switch gt.Kind {
	case gates.KindCNI:
		ref := s.Class.Spec.Readiness.CNI.DaemonSet
		if ref == nil {
			return gates.CheckCNI(node, nil, nil), nil
		}
		ready, err := g.daemonSetPodReady(ctx, ref, node.Name)
		if err != nil {
			return gates.Observation{}, err
		}
		return gates.CheckCNI(node, ref, &ready), nil
	case gates.KindGPU:
		return gates.CheckGPU(node, gates.GPUResources(s.NodeType), s.Class.Spec.Readiness.GPU.ValidatorLabel), nil
	default:
		return gates.CheckCustom(node, gt.Custom), nil
	}
}

// daemonSetPodReady reports whether the DaemonSet has a Ready pod on the node.
func (g *gateStage) daemonSetPodReady(ctx context.Context, ref *v1alpha1.ObjectRef, nodeName string) (bool, error) {
	ds := &appsv1.DaemonSet{}
	if err := g.kube.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, ds); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if ds.Spec.Selector == nil {
		return false, nil
	}
	pods := &corev1.PodList{}
	if err := g.kube.List(ctx, pods, client.InNamespace(ref.Namespace), client.MatchingLabels(ds.Spec.Selector.MatchLabels)); err != nil {
		return false, fmt.Errorf("listing pods of daemonset %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != nodeName || !metav1.IsControlledBy(&p, ds) {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
	}
	return false, nil
}

// removeTaints removes the taints from the node; the optimistic lock keeps a concurrent
// change (Karpenter syncing its own taints) from being overwritten.
func (g *gateStage) removeTaints(ctx context.Context, node *corev1.Node, keys []string) error {
	patched := node.DeepCopy()
	patched.Spec.Taints = nil
	for _, t := range node.Spec.Taints {
		drop := false
		for _, k := range keys {
			drop = drop || t.Key == k
		}
		if !drop {
			patched.Spec.Taints = append(patched.Spec.Taints, t)
		}
	}
	if err := g.kube.Patch(ctx, patched, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing readiness taints from node %s: %w", node.Name, err)
	}
	return nil
}

func gateKindOf(cond string) string {
	switch cond {
	case v1alpha1.ConditionCNIReady:
		return gates.KindCNI
	case v1alpha1.ConditionGPUReady:
		return gates.KindGPU
	}
	return gates.KindCustom
}

func setGateStage(st *v1alpha1.Stages, cond string, t *metav1.Time) {
	switch cond {
	case v1alpha1.ConditionCNIReady:
		st.CNIReady = t
	case v1alpha1.ConditionGPUReady:
		st.GPUReady = t
	case v1alpha1.ConditionGatesReady:
		st.GatesReady = t
	}
}
