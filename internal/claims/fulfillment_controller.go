// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// Options configure the Fulfillment controller.
type Options struct {
	// Namespace holds the claims' user data and runs, and the Secrets classes name.
	Namespace string
	// StateNamespace holds the claims' states and locks (kubernetes backend) unless a class
	// names its own; empty: Namespace.
	StateNamespace string
	// TofuPath is the tofu binary runners use.
	TofuPath string
	// TofuStartsProviders leaves starting the providers to tofu, once per step of a run,
	// instead of the runner starting each once per run (tfrunner.Request.TofuStartsProviders).
	TofuStartsProviders bool
	// RunEnv is extra environment for every run (e.g. KUBECONFIG for the kubernetes backend
	// when runs are local processes).
	RunEnv map[string]string
	// MaxApplyAttempts bounds retries of an apply that failed transiently.
	MaxApplyAttempts int
	// RetryBackoff is the first wait before a retried run; it doubles per attempt.
	RetryBackoff time.Duration
	// DestroyDeadline bounds a destroy run (default DefaultDestroyDeadline), as a node type's
	// deadlines.apply bounds its applies: the runner interrupts tofu at it.
	DestroyDeadline time.Duration
	// Families are the node-type families classes may name (nil: generic classes only).
	Families family.Registry
	// ClusterName is this cluster's name: the value of the cluster label the modules put on
	// every machine (v1alpha1.LabelCluster).
	ClusterName string
}

// DefaultDestroyDeadline bounds a destroy when Options set none (FULFILLER_DESTROY_DEADLINE).
const DefaultDestroyDeadline = 30 * time.Minute

// FulfillmentController drives one claim from decision to a Ready node, and from deletion to a
// destroyed machine with its state removed. Each stage is a small type in its own file that
// returns early once its condition is settled; status is written once per reconcile.
type FulfillmentController struct {
	kube client.Client
	// apiReader reads from the API server, uncached: Secrets and ConfigMaps are not in the
	// cache, and a Secret this controller just created must be readable at once.
	apiReader   client.Reader
	clock       clock.Clock
	recorder    events.Recorder
	executor    executor.Executor
	unavailable *UnavailableOfferings
	opts        Options
	waiters     *runWaiters
}

func NewFulfillmentController(kube client.Client, apiReader client.Reader, clk clock.Clock, recorder events.Recorder, executor executor.Executor, unavailable *UnavailableOfferings, opts Options) *FulfillmentController {
	if opts.MaxApplyAttempts == 0 {
		opts.MaxApplyAttempts = 3
	}
	if opts.RetryBackoff == 0 {
		opts.RetryBackoff = 5 * time.Second
	}
	if opts.DestroyDeadline == 0 {
		opts.DestroyDeadline = DefaultDestroyDeadline
	}
	return &FulfillmentController{kube: kube, apiReader: apiReader, clock: clk, recorder: recorder, executor: executor, unavailable: unavailable, opts: opts,
		waiters: newRunWaiters()}
}

// RunEnded wakes the claim of a run that an executor saw end (executor.Local.OnEnd),
// so that its end is recorded at once rather than at the next poll.
func (c *FulfillmentController) RunEnded(_ string, labels map[string]string) {
	if name := labels[tfrunner.LabelNodeClaim]; name != "" {
		c.waiters.enqueue(name)
	}
}

// claimState is what the stages share in one reconcile.
type claimState struct {
	f     *v1alpha1.Fulfillment
	claim *karpv1.NodeClaim // nil when the NodeClaim is gone
	nc    *v1alpha1.TofuNodeClass
	nt    *v1alpha1.NodeType
	conds status.ConditionSet
	// events to publish after the status is written
	events []events.Event
	// removeFinalizer is set by the finalizer once the machine and its state are gone
	removeFinalizer bool
	// replaceClaim asks Karpenter to replace the claim; done only after the status that
	// says why is written.
	replaceClaim bool
	// observed is the family's observation of the created machine (machineStage), nil when
	// its family has no watcher or the machine is not created yet.
	observed *family.Observation
	// afterWrite runs once the status is written (metrics of what changed).
	afterWrite []func()
	// minted is what the bootstrap stage made in this reconcile (the stages after it need
	// not read it back); zero otherwise.
	minted minted
}

// minted is a claim's user data and its bootstrap token's expiry, as the bootstrap stage
// made them.
type minted struct {
	userData     string
	tokenExpires time.Time
}

type stage interface {
	reconcile(ctx context.Context, s *claimState) (reconcile.Result, error)
}

func (c *FulfillmentController) Register(_ context.Context, m manager.Manager) error {
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetName()}}}
	})
	return controllerruntime.NewControllerManagedBy(m).
		Named("fulfillment").
		For(&v1alpha1.Fulfillment{}).
		Watches(&karpv1.NodeClaim{}, byName).
		Watches(&corev1.Node{}, byName).
		// Claims woken when a run ends: its own, and the one waiting longest for a runner.
		WatchesRawSource(source.Channel(c.waiters.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 10}).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}

func (c *FulfillmentController) Reconcile(ctx context.Context, f *v1alpha1.Fulfillment) (reconcile.Result, error) {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("fulfillment", f.Name, "nodeType", f.Spec.NodeType))
	s, err := c.gather(ctx, f)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !f.DeletionTimestamp.IsZero() {
		return c.finish(ctx, s, f, []stage{&finalizeStage{c}})
	}
	if s.claim == nil || string(s.claim.UID) != f.Spec.NodeClaimUID {
		// The claim went away without Delete (e.g. deleted before it launched): destroy.
		if c.clock.Since(f.CreationTimestamp.Time) > 30*time.Second {
			log.FromContext(ctx).Info("nodeclaim is gone, destroying its machine")
			return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, f))
		}
		return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
	}
	if !controllerutil.ContainsFinalizer(f, FinalizerDestroy) {
		patched := f.DeepCopy()
		controllerutil.AddFinalizer(patched, FinalizerDestroy)
		if err := c.kube.Patch(ctx, patched, client.MergeFrom(f)); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return c.finish(ctx, s, f, []stage{&bootstrapStage{c}, &tokenStage{c}, &applyStage{c}, &machineStage{c}, &joinStage{c}, &gateStage{c}, &initializationStage{c}, replaceStage{}})
}

func (c *FulfillmentController) gather(ctx context.Context, f *v1alpha1.Fulfillment) (*claimState, error) {
	s := &claimState{f: f.DeepCopy()}
	s.conds = s.f.StatusConditions(status.WithClock(c.clock))
	claim := &karpv1.NodeClaim{}
	switch err := c.kube.Get(ctx, client.ObjectKey{Name: f.Name}, claim); {
	case err == nil:
		s.claim = claim
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading nodeclaim: %w", err)
	}
	nc := &v1alpha1.TofuNodeClass{}
	switch err := c.kube.Get(ctx, client.ObjectKey{Name: f.Spec.NodeClass}, nc); {
	case err == nil:
		s.nc = nc
		s.nt, _ = nc.NodeType(f.Spec.NodeType)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading nodeclass: %w", err)
	}
	if s.f.Status.Stages.ClaimCreated == nil && s.claim != nil {
		s.f.Status.Stages.ClaimCreated = s.claim.CreationTimestamp.DeepCopy()
	}
	return s, nil
}

// finish runs the stages in order, then writes the status once and publishes the events of
// what changed.
func (c *FulfillmentController) finish(ctx context.Context, s *claimState, orig *v1alpha1.Fulfillment, stages []stage) (reconcile.Result, error) {
	var result reconcile.Result
	var errs []error
	for _, st := range stages {
		r, err := st.reconcile(ctx, s)
		if err != nil {
			errs = append(errs, err)
		}
		result = mergeResults(result, r)
	}
	shortenMessages(s.f.Status.Conditions)
	s.f.Status.Phase, s.f.Status.Reason, s.f.Status.Message = phase(s.f)
	if !equality.Semantic.DeepEqual(orig.Status, s.f.Status) {
		// Optimistic lock: a reconcile that worked from a stale copy must not overwrite what
		// a newer one wrote (lists such as conditions and runs are replaced whole).
		err := c.kube.Status().Patch(ctx, s.f, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsNotFound(err):
			return reconcile.Result{}, nil
		case apierrors.IsConflict(err):
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, errors.Join(errs...)
		case err != nil:
			errs = append(errs, fmt.Errorf("writing status: %w", err))
		default:
			c.recorder.Publish(shortenEventMessages(s.events)...)
			for _, fn := range s.afterWrite {
				fn()
			}
		}
	}
	if len(errs) == 0 {
		if err := c.announceProviderID(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	if s.replaceClaim {
		if err := c.deleteClaim(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	if s.removeFinalizer {
		patched := s.f.DeepCopy()
		controllerutil.RemoveFinalizer(patched, FinalizerDestroy)
		if err := c.kube.Patch(ctx, patched, client.MergeFrom(s.f)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("removing finalizer: %w", err))
		}
	}
	return result, errors.Join(errs...)
}

// announceProviderID puts the provider ID the apply reported on a claim that has none yet
// (AnnotationProviderID), once it is in the Fulfillment's status: Karpenter then calls Create
// again at once instead of after its backoff, and Create returns it.
func (c *FulfillmentController) announceProviderID(ctx context.Context, s *claimState) error {
	id := s.f.Status.ProviderID
	if s.claim == nil || string(s.claim.UID) != s.f.Spec.NodeClaimUID || !s.claim.DeletionTimestamp.IsZero() || !s.f.DeletionTimestamp.IsZero() ||
		s.claim.Status.ProviderID != "" || id == "" || s.f.Spec.ProviderID != "" || s.claim.Annotations[AnnotationProviderID] == id {
		return nil
	}
	patched := s.claim.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[AnnotationProviderID] = id
	if err := c.kube.Patch(ctx, patched, client.MergeFrom(s.claim)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("announcing the provider id on the nodeclaim: %w", err)
	}
	return nil
}

// replaceStage asks for a claim that failed for good to be replaced, also when an earlier
// attempt to delete it did not go through.
type replaceStage struct{}

func (replaceStage) reconcile(_ context.Context, s *claimState) (reconcile.Result, error) {
	s.replaceClaim = s.replaceClaim || failed(s)
	return reconcile.Result{}, nil
}

func mergeResults(a, b reconcile.Result) reconcile.Result {
	if b.RequeueAfter > 0 && (a.RequeueAfter == 0 || b.RequeueAfter < a.RequeueAfter) {
		a.RequeueAfter = b.RequeueAfter
	}
	return a
}

// deleteClaim asks Karpenter to replace the claim (it plans again and calls Delete).
func (c *FulfillmentController) deleteClaim(ctx context.Context, s *claimState) error {
	if s.claim == nil || !s.claim.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := c.kube.Delete(ctx, s.claim); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting nodeclaim: %w", err)
	}
	return nil
}
