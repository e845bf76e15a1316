// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// gateStage opens the node's readiness gates: once a gate's check passes, its
// readiness.k8s.io/ taint is removed from the Node (Karpenter initializes the claim only when
// none is left). A gate that misses its deadline turns its condition False with a precise
// reason, an event and a metric, and the NodeClass's policy decides: keep the node
// (ReportOnly; the gate still opens if the check passes later) or replace the claim.
type gateStage struct{ c *FulfillmentController }

// gateConditions are the conditions of the gates, each with the stage time it stamps.
var gateConditions = []string{v1alpha1.ConditionCNIReady, v1alpha1.ConditionGPUReady, v1alpha1.ConditionGatesReady}

func (g *gateStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if !s.conds.IsTrue(v1alpha1.ConditionJoined) || s.nc == nil || s.nt == nil || s.f.Status.NodeName == "" || s.f.Status.Stages.Registered == nil {
		return reconcile.Result{}, nil
	}
	node := &corev1.Node{}
	if err := g.c.kube.Get(ctx, client.ObjectKey{Name: s.f.Status.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading node: %w", err)
	}
	gates := gatesFor(s.nc, s.nt)
	// Taken before any taint is removed: a gate's stage time is never after a pod that the
	// open gate let in was scheduled.
	now := g.c.clock.Now()
	waited := now.Sub(s.f.Status.Stages.Registered.Time)
	decisions := map[string][]gateDecision{}
	remove := staleGateTaints(node, gates)
	var result reconcile.Result
	for _, gt := range gates {
		var d gateDecision
		if !hasTaint(node, gt.taint) {
			d = gateDecision{open: true, status: metav1.ConditionTrue, reason: v1alpha1.ReasonGateOpen, message: gt.name + " gate open"}
			if c := s.conds.Get(gt.condition); c != nil && c.IsTrue() {
				d.message = c.Message
			}
		} else {
			obs, err := g.observe(ctx, s, gt, node)
			if err != nil {
				return reconcile.Result{}, err
			}
			d = decideGate(gt, obs, waited)
			if d.open {
				remove = append(remove, gt.taint)
			}
		}
		decisions[gt.condition] = append(decisions[gt.condition], d)
		if d.requeue > 0 {
			result = mergeResults(result, reconcile.Result{RequeueAfter: d.requeue})
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
	policy := s.nc.Spec.Readiness.PolicyOrDefault()
	for _, cond := range gateConditions {
		ds, ok := decisions[cond]
		if !ok {
			if s.conds.Get(cond) == nil || !s.conds.IsTrue(cond) {
				s.conds.SetTrueWithReason(cond, v1alpha1.ReasonGateNotApplicable, "no such gate for node type "+s.nt.Name)
			}
			continue
		}
		g.apply(s, cond, rollUp(ds), policy, now, waited)
	}
	return result, nil
}

// apply records one condition's decision: stage time, metric and event on a change.
func (g *gateStage) apply(s *claimState, cond string, d gateDecision, policy v1alpha1.GatePolicy, now time.Time, waited time.Duration) {
	before := s.conds.Get(cond)
	kind := gateKindOf(cond)
	nodeType := s.nt.Name
	switch d.status {
	case metav1.ConditionTrue:
		if before != nil && before.IsTrue() {
			return
		}
		s.conds.SetTrueWithReason(cond, d.reason, d.message)
		opened := metav1.NewTime(now)
		setGateStage(&s.f.Status.Stages, cond, &opened)
		s.events = append(s.events, gateOpenedEvent(s.f, cond, d.message))
		s.afterWrite = append(s.afterWrite, func() { gateDuration.WithLabelValues(kind, nodeType).Observe(waited.Seconds()) })
	case metav1.ConditionUnknown:
		s.conds.SetUnknownWithReason(cond, d.reason, d.message)
	case metav1.ConditionFalse:
		if before == nil || !before.IsFalse() || before.Reason != d.reason {
			s.events = append(s.events, gateTimeoutEvent(s.f, d.reason, d.message, policy))
			if s.claim != nil {
				s.events = append(s.events, gateTimeoutEvent(s.claim, d.reason, d.message, policy))
			}
			s.afterWrite = append(s.afterWrite, func() { gateTimeouts.WithLabelValues(kind, nodeType, string(policy)).Inc() })
		}
		s.conds.SetFalse(cond, d.reason, d.message)
		if policy == v1alpha1.GatePolicyReplace {
			s.replaceClaim = true
		}
	}
}

// observe reads what one gate's check needs.
func (g *gateStage) observe(ctx context.Context, s *claimState, gt gate, node *corev1.Node) (gateObservation, error) {
	switch gt.kind {
	case gateCNI:
		ref := s.nc.Spec.Readiness.CNI.DaemonSet
		if ref == nil {
			return checkCNI(node, nil, nil), nil
		}
		ready, err := g.daemonSetPodReady(ctx, ref, node.Name)
		if err != nil {
			return gateObservation{}, err
		}
		return checkCNI(node, ref, &ready), nil
	case gateGPU:
		return checkGPU(node, gpuResources(s.nt), s.nc.Spec.Readiness.GPU.ValidatorLabel), nil
	default:
		return checkCustom(node, gt.custom), nil
	}
}

// daemonSetPodReady reports whether the DaemonSet has a Ready pod on the node.
func (g *gateStage) daemonSetPodReady(ctx context.Context, ref *v1alpha1.ObjectRef, nodeName string) (bool, error) {
	ds := &appsv1.DaemonSet{}
	if err := g.c.kube.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, ds); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if ds.Spec.Selector == nil {
		return false, nil
	}
	pods := &corev1.PodList{}
	if err := g.c.kube.List(ctx, pods, client.InNamespace(ref.Namespace), client.MatchingLabels(ds.Spec.Selector.MatchLabels)); err != nil {
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
	if err := g.c.kube.Patch(ctx, patched, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing readiness taints from node %s: %w", node.Name, err)
	}
	return nil
}

func gateKindOf(cond string) string {
	switch cond {
	case v1alpha1.ConditionCNIReady:
		return gateCNI
	case v1alpha1.ConditionGPUReady:
		return gateGPU
	}
	return gateCustom
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
