// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package scaledown is the billing-aware scale-down of the classes that turn it on
// (spec.scaleDown.policy AtPaidPeriodEnd): a node that Karpenter would consolidate as empty
// (its NodeClaim Consolidatable, no pods but daemons) is held with karpenter.sh/do-not-disrupt
// on its Node until a margin before the end of the billing period it is in, so that it takes
// new pods instead of a new machine being bought within a period already paid for; then it is
// let go and Karpenter consolidates it. A drifted, expired or unhealthy node is never held, and
// a do-not-disrupt annotation the fulfiller did not set (keys.AnnotationScaleDownHeld marks
// its own) is never changed. Each claim's Fulfillment says why in its ScaleDownHeld
// condition, with an event when a hold starts or ends.
package scaledown

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"
	podutils "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/billing"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// podNodeNameField is the field index of Pods by spec.nodeName that Karpenter's operator
// registers in the manager's cache (a field selector the API server also serves).
const podNodeNameField = "spec.nodeName"

// Options are what the controller is built from.
type Options struct {
	Kube     client.Client
	Clock    clock.Clock
	Recorder events.Recorder
	// Families give a class that states no billing period its family's (family.Billing).
	Families family.Registry
}

// Controller holds and lets go of the empty nodes of the classes with a billing-aware
// scale-down. It reconciles Fulfillments (a claim's Fulfillment, NodeClaim and Node share its
// name).
type Controller struct {
	kube     client.Client
	clock    clock.Clock
	recorder events.Recorder
	families family.Registry
}

// NewController builds the controller.
func NewController(o Options) *Controller {
	return &Controller{kube: o.Kube, clock: o.Clock, recorder: o.Recorder, families: o.Families}
}

func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetName()}}}
	})
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaledown").
		For(&v1alpha1.Fulfillment{}).
		// Consolidatable, Drifted and the last pod event are on the NodeClaim; annotations and
		// Ready on the Node; emptiness in the pods bound to it.
		Watches(&karpv1.NodeClaim{}, byName).
		Watches(&corev1.Node{}, byName).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: p.Spec.NodeName}}}
			}
			return nil
		})).
		// A class that turns its policy on or off, or changes its period: a change of its spec
		// (its status changes often, and says nothing of the policy).
		Watches(&v1alpha1.TofuNodeClass{}, handler.EnqueueRequestsFromMapFunc(c.claimsOfClass),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}

// claimsOfClass are the claims of a class.
func (c *Controller) claimsOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1alpha1.FulfillmentList{}
	if err := c.kube.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "listing fulfillments of a nodeclass", "nodeclass", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Spec.NodeClass == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
		}
	}
	return out
}

// claim is what one reconcile gathered of a claim.
type claim struct {
	f      *v1alpha1.Fulfillment
	policy billing.Policy
	// on: the claim's class has the policy, and the claim is live and initialized with a Node.
	on    bool
	claim *karpv1.NodeClaim
	node  *corev1.Node
	pods  int
}

// Reconcile gathers the claim, decides, holds or lets go of its Node, then writes the
// Fulfillment's ScaleDownHeld condition once and publishes the events of what changed.
func (c *Controller) Reconcile(ctx context.Context, f *v1alpha1.Fulfillment) (reconcile.Result, error) {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("fulfillment", f.Name))
	s, err := c.gather(ctx, f)
	if err != nil {
		return reconcile.Result{}, err
	}
	// Without the policy (any more), or for a claim it has nothing to do with (not initialized,
	// going), what it held is let go and the condition goes.
	var out outcome
	var result reconcile.Result
	if s.on {
		now := c.clock.Now()
		out = decide(c.facts(s, now), now)
		if !out.requeue.IsZero() {
			// A second past it: the clock's decision has changed by then.
			result.RequeueAfter = max(out.requeue.Sub(now), 0) + time.Second
		}
	}
	if out.hold {
		err = c.hold(ctx, s.node, out.until)
	} else {
		err = c.release(ctx, s.node)
	}
	switch {
	case errors.Is(err, errNodeChanged):
		// Read again (the cache has the change by then) and decide anew.
		return reconcile.Result{RequeueAfter: nodeChangedRequeue}, nil
	case err != nil || !s.on && held(f) == nil:
		return reconcile.Result{}, err
	}
	updated := f.DeepCopy()
	conds := updated.StatusConditions(status.WithClock(c.clock))
	switch {
	case !s.on:
		_ = conds.Clear(v1alpha1.ConditionScaleDownHeld)
	case out.status == metav1.ConditionTrue:
		conds.SetTrueWithReason(v1alpha1.ConditionScaleDownHeld, out.reason, out.message)
	default:
		conds.SetFalse(v1alpha1.ConditionScaleDownHeld, out.reason, out.message)
	}
	classconfig.ShortenConditions(updated.Status.Conditions)
	if equality.Semantic.DeepEqual(f.Status, updated.Status) {
		return result, nil
	}
	switch err := c.kube.Status().Patch(ctx, updated, client.MergeFromWithOptions(f, client.MergeFromWithOptimisticLock{})); {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, nil
	case apierrors.IsConflict(err):
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("writing status: %w", err)
	}
	c.recorder.Publish(classconfig.ShortenEvents(changeEvents(f, updated, s.claim))...)
	return result, nil
}

// gather reads the claim's class, NodeClaim, Node and the pods bound to it.
func (c *Controller) gather(ctx context.Context, f *v1alpha1.Fulfillment) (*claim, error) {
	s := &claim{f: f}
	if name := nodeName(f); name != "" {
		node := &corev1.Node{}
		switch err := c.kube.Get(ctx, client.ObjectKey{Name: name}, node); {
		case err == nil:
			s.node = node
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading node: %w", err)
		}
	}
	nodeClaim := &karpv1.NodeClaim{}
	switch err := c.kube.Get(ctx, client.ObjectKey{Name: f.Name}, nodeClaim); {
	case err == nil && string(nodeClaim.UID) == f.Spec.NodeClaimUID:
		s.claim = nodeClaim
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading nodeclaim: %w", err)
	}
	nc := &v1alpha1.TofuNodeClass{}
	switch err := c.kube.Get(ctx, client.ObjectKey{Name: f.Spec.NodeClass}, nc); {
	case apierrors.IsNotFound(err):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("reading nodeclass: %w", err)
	}
	policy, ok := classconfig.ScaleDownPolicy(c.families, nc)
	// A claim that is going is going anyway; one not initialized is not Karpenter's to
	// consolidate yet.
	if !ok || !f.DeletionTimestamp.IsZero() || s.node == nil || !s.node.DeletionTimestamp.IsZero() || s.claim == nil ||
		!s.claim.DeletionTimestamp.IsZero() || !s.claim.StatusConditions().IsTrue(karpv1.ConditionTypeInitialized) {
		return s, nil
	}
	pods := &corev1.PodList{}
	if err := c.kube.List(ctx, pods, client.MatchingFields{podNodeNameField: s.node.Name}); err != nil {
		return nil, fmt.Errorf("listing the node's pods: %w", err)
	}
	for i := range pods.Items {
		if podutils.IsReschedulable(&pods.Items[i]) {
			s.pods++
		}
	}
	s.policy, s.on = policy, true
	return s, nil
}

// nodeName is the claim's Node: the one that registered, else the name its machine registers
// with.
func nodeName(f *v1alpha1.Fulfillment) string {
	if f.Status.NodeName != "" {
		return f.Status.NodeName
	}
	return f.Spec.NodeName
}

// facts are the decision's inputs of a gathered claim at now.
func (c *Controller) facts(s *claim, now time.Time) facts {
	launched := s.claim.CreationTimestamp.Time
	if a := s.f.Status.Stages.Applied; a != nil {
		launched = a.Time
	}
	expireAfter := s.claim.Spec.ExpireAfter.Duration
	ready := false
	for _, cond := range s.node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	_, theirs := othersAnnotation(s.node)
	return facts{
		policy:           s.policy,
		launched:         launched,
		consolidatable:   s.claim.StatusConditions().IsTrue(karpv1.ConditionTypeConsolidatable),
		pods:             s.pods,
		drifted:          s.claim.StatusConditions().IsTrue(karpv1.ConditionTypeDrifted),
		expired:          expireAfter != nil && !now.Before(s.claim.CreationTimestamp.Add(*expireAfter)),
		unhealthy:        !ready,
		othersAnnotation: theirs,
	}
}

// othersAnnotation reports whether the node's hold is the fulfiller's (its mark is there and
// do-not-disrupt is "true"), and whether it carries a do-not-disrupt annotation that is someone
// else's (without the mark, or changed from the "true" the fulfiller set).
func othersAnnotation(node *corev1.Node) (ours, theirs bool) {
	value, set := node.Annotations[karpv1.DoNotDisruptAnnotationKey]
	_, marked := node.Annotations[keys.AnnotationScaleDownHeld]
	ours = marked && set && value == "true"
	return ours, set && !ours
}

// hold puts the fulfiller's do-not-disrupt annotation and its mark (the hold's end) on the
// node. A node with someone else's annotation is never reached here (decide).
func (c *Controller) hold(ctx context.Context, node *corev1.Node, until time.Time) error {
	value := until.UTC().Format(time.RFC3339)
	if node.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true" && node.Annotations[keys.AnnotationScaleDownHeld] == value {
		return nil
	}
	patched := node.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[karpv1.DoNotDisruptAnnotationKey] = "true"
	patched.Annotations[keys.AnnotationScaleDownHeld] = value
	return c.patchNode(ctx, node, patched)
}

// release takes the fulfiller's hold off the node: its mark, and do-not-disrupt with it when
// that is still the "true" it set. Someone else's annotation stays.
func (c *Controller) release(ctx context.Context, node *corev1.Node) error {
	if node == nil {
		return nil
	}
	if _, marked := node.Annotations[keys.AnnotationScaleDownHeld]; !marked {
		return nil
	}
	ours, _ := othersAnnotation(node)
	patched := node.DeepCopy()
	delete(patched.Annotations, keys.AnnotationScaleDownHeld)
	if ours {
		delete(patched.Annotations, karpv1.DoNotDisruptAnnotationKey)
	}
	return c.patchNode(ctx, node, patched)
}

// errNodeChanged: the Node changed since it was read (its kubelet, Karpenter, the TTL
// controller write it too); nodeChangedRequeue is how soon it is read again.
var errNodeChanged = errors.New("node changed since it was read")

const nodeChangedRequeue = 100 * time.Millisecond

// patchNode writes the node's annotations, refused for a node changed since it was read
// (errNodeChanged): a do-not-disrupt annotation someone set meanwhile is never taken for the
// fulfiller's, nor removed.
func (c *Controller) patchNode(ctx context.Context, node, patched *corev1.Node) error {
	err := c.kube.Patch(ctx, patched, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err):
		return errNodeChanged
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("annotating node %s: %w", node.Name, err)
	}
	return nil
}
