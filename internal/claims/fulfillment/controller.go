// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

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
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// Options are what the Fulfillment controller is built from.
type Options struct {
	Kube client.Client
	// APIReader reads from the API server, uncached: Secrets and ConfigMaps are not in the
	// cache, and a Secret this controller just created must be readable at once.
	APIReader   client.Reader
	Clock       clock.Clock
	Recorder    events.Recorder
	Executor    executor.Executor
	Unavailable run.Unavailable
	// Namespace holds the claims' user data and runs, and the Secrets classes name.
	Namespace string
	// StateNamespace holds the claims' states and locks (kubernetes backend) unless a class
	// names its own, and the pools' leases.
	StateNamespace string
	// TofuPath is the tofu binary runners use.
	TofuPath string
	// RunnerShortcuts turns on the runner's fast paths (tfrunner.Request.Shortcuts).
	RunnerShortcuts bool
	// RunEnv is extra environment for every run (e.g. KUBECONFIG for the kubernetes backend
	// when runs are local processes).
	RunEnv map[string]string
	// MaxApplyAttempts bounds retries of an apply that failed transiently (default 3).
	MaxApplyAttempts int
	// RetryBackoff is the first wait before a retried run; it doubles per attempt.
	RetryBackoff time.Duration
	// DestroyDeadline bounds a destroy run (default run.DefaultDestroyDeadline), as a node
	// type's deadlines.apply bounds its applies: the runner interrupts tofu at it.
	DestroyDeadline time.Duration
	// Families are the node-type families classes may name (nil: generic classes only).
	Families family.Registry
	// ClusterName is this cluster's name: the value of the cluster label the modules put on
	// every machine (keys.LabelCluster).
	ClusterName string
	// ServerVersion is the API server's version (vX.Y.Z): the Kubernetes version a class
	// that names none installs on its machines.
	ServerVersion func(context.Context) (string, error)
}

// Controller drives one claim from decision to a Ready node, and from deletion to a
// destroyed machine with its state removed. Each stage is a small type in its own file that
// holds what it uses and returns early once its condition is settled; status is written once
// per reconcile.
type Controller struct {
	kube     client.Client
	clock    clock.Clock
	recorder events.Recorder
	runs     *run.Runs
	// stages run in order on a claim that is not deleted, finalize on one that is.
	stages   []stage
	finalize stage
}

// NewController builds the controller and its stages.
func NewController(o Options) *Controller {
	if o.MaxApplyAttempts == 0 {
		o.MaxApplyAttempts = 3
	}
	runs := run.New(run.Options{Kube: o.Kube, APIReader: o.APIReader, Clock: o.Clock, Executor: o.Executor, Unavailable: o.Unavailable,
		Namespace: o.Namespace, StateNamespace: o.StateNamespace, TofuPath: o.TofuPath, RunnerShortcuts: o.RunnerShortcuts,
		RunEnv: o.RunEnv, RetryBackoff: o.RetryBackoff, DestroyDeadline: o.DestroyDeadline, ClusterName: o.ClusterName})
	apply := applyRuns(runs, o.Clock, o.MaxApplyAttempts)
	c := &Controller{kube: o.Kube, clock: o.Clock, recorder: o.Recorder, runs: runs}
	if o.Kube != nil {
		claimInventory.source.Store(&inventorySource{kube: o.Kube, clock: o.Clock})
	}
	c.stages = []stage{
		&bootstrapStage{kube: o.Kube, apiReader: o.APIReader, clock: o.Clock, unavailable: o.Unavailable, namespace: o.Namespace, serverVersion: o.ServerVersion, families: o.Families},
		&tokenStage{kube: o.Kube, apiReader: o.APIReader, clock: o.Clock},
		&applyStage{runs: apply, clock: o.Clock},
		&machineStage{runs: runs, apiReader: o.APIReader, families: o.Families, namespace: o.Namespace, cluster: o.ClusterName},
		&joinStage{kube: o.Kube, clock: o.Clock, unavailable: o.Unavailable, namespace: o.Namespace},
		&gateStage{kube: o.Kube, clock: o.Clock},
		&initializationStage{},
		replaceStage{},
	}
	c.finalize = &finalizeStage{kube: o.Kube, clock: o.Clock, runs: runs, apply: apply, destroy: destroyRuns(runs),
		pools: &classconfig.Pools{Families: o.Families, Reader: o.APIReader, Writer: o.Kube, StateNamespace: o.StateNamespace}, namespace: o.Namespace}
	return c
}

// RunEnded wakes the claim of a run that an executor saw end (executor.Local.OnEnd),
// so that its end is recorded at once rather than at the next poll.
func (c *Controller) RunEnded(name string, labels map[string]string) { c.runs.RunEnded(name, labels) }

// claimState is what the stages share in one reconcile: what the runs read and change
// (run.Claim), and the rest.
type claimState struct {
	run.Claim
	claim *karpv1.NodeClaim // nil when the NodeClaim is gone
	// removeFinalizer is set by the finalizer once the machine and its state are gone
	removeFinalizer bool
	// observed is the family's observation of the created machine (machineStage), nil when
	// its family has no watcher or the machine is not created yet.
	observed *family.Observation
	// afterWrite runs once the status is written (metrics of what changed).
	afterWrite []func()
	// tokenExpires is the expiry of the bootstrap token the bootstrap stage minted in this
	// reconcile (the stages after it need not read it back); zero otherwise.
	tokenExpires time.Time
}

// classFamily is the family of the claim's class, "" for a generic class or one that is gone.
func classFamily(s *claimState) string {
	if s.Class == nil {
		return ""
	}
	return s.Class.Spec.Family
}

type stage interface {
	reconcile(ctx context.Context, s *claimState) (reconcile.Result, error)
}

func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetName()}}}
	})
	return controllerruntime.NewControllerManagedBy(m).
		Named("fulfillment").
		For(&v1alpha1.Fulfillment{}).
		Watches(&karpv1.NodeClaim{}, byName).
		Watches(&corev1.Node{}, byName).
		// What the claim's machine reports of its boot.
		Watches(&v1alpha1.BootReport{}, byName).
		// Claims woken when a run ends: its own, and the one waiting longest for a runner.
		WatchesRawSource(source.Channel(c.runs.Wake(), &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 10}).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}

func (c *Controller) Reconcile(ctx context.Context, f *v1alpha1.Fulfillment) (reconcile.Result, error) {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("fulfillment", f.Name, "nodeType", f.Spec.NodeType))
	s, err := c.gather(ctx, f)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !f.DeletionTimestamp.IsZero() {
		return c.finish(ctx, s, f, []stage{c.finalize})
	}
	if s.claim == nil || string(s.claim.UID) != f.Spec.NodeClaimUID {
		// The claim went away without Delete (e.g. deleted before it launched): destroy.
		if c.clock.Since(f.CreationTimestamp.Time) > 30*time.Second {
			log.FromContext(ctx).Info("nodeclaim is gone, destroying its machine")
			return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, f))
		}
		return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
	}
	if !controllerutil.ContainsFinalizer(f, classconfig.FinalizerDestroy) {
		patched := f.DeepCopy()
		controllerutil.AddFinalizer(patched, classconfig.FinalizerDestroy)
		if err := c.kube.Patch(ctx, patched, client.MergeFrom(f)); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return c.finish(ctx, s, f, c.stages)
}

func (c *Controller) gather(ctx context.Context, f *v1alpha1.Fulfillment) (*claimState, error) {
	s := &claimState{Claim: run.Claim{F: f.DeepCopy()}}
	s.Conds = s.F.StatusConditions(status.WithClock(c.clock))
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
		s.Class = nc
		s.NodeType, _ = nc.NodeType(f.Spec.NodeType)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading nodeclass: %w", err)
	}
	if s.F.Status.Stages.ClaimCreated == nil && s.claim != nil {
		s.F.Status.Stages.ClaimCreated = s.claim.CreationTimestamp.DeepCopy()
	}
	return s, nil
}

// finish runs the stages in order, then writes the status once and publishes the events of
// what changed; the events of what was done outside the status (s.Done) are published
// whatever becomes of the write.
func (c *Controller) finish(ctx context.Context, s *claimState, orig *v1alpha1.Fulfillment, stages []stage) (reconcile.Result, error) {
	var result reconcile.Result
	var errs []error
	for _, st := range stages {
		r, err := st.reconcile(ctx, s)
		if err != nil {
			errs = append(errs, err)
		}
		result = mergeResults(result, r)
	}
	defer func() { c.recorder.Publish(classconfig.ShortenEvents(s.Done)...) }()
	classconfig.ShortenConditions(s.F.Status.Conditions)
	s.F.Status.Phase, s.F.Status.Reason, s.F.Status.Message = phase(s.F)
	if !equality.Semantic.DeepEqual(orig.Status, s.F.Status) {
		// Optimistic lock: a reconcile that worked from a stale copy must not overwrite what
		// a newer one wrote (lists such as conditions and runs are replaced whole).
		err := c.kube.Status().Patch(ctx, s.F, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsNotFound(err):
			return reconcile.Result{}, nil
		case apierrors.IsConflict(err):
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, errors.Join(errs...)
		case err != nil:
			errs = append(errs, fmt.Errorf("writing status: %w", err))
		default:
			c.recorder.Publish(classconfig.ShortenEvents(s.Events)...)
			for _, o := range observeChanges(orig, s.F, classFamily(s)) {
				o.record()
			}
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
	if s.Replace {
		if err := deleteClaim(ctx, c.kube, s); err != nil {
			errs = append(errs, err)
		}
	}
	if s.removeFinalizer {
		patched := s.F.DeepCopy()
		controllerutil.RemoveFinalizer(patched, classconfig.FinalizerDestroy)
		if err := c.kube.Patch(ctx, patched, client.MergeFrom(s.F)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("removing finalizer: %w", err))
		}
	}
	return result, errors.Join(errs...)
}

// announceProviderID puts the provider ID the apply reported on a claim that has none yet
// (classconfig.AnnotationProviderID), once it is in the Fulfillment's status: Karpenter then
// calls Create again at once instead of after its backoff, and Create returns it.
func (c *Controller) announceProviderID(ctx context.Context, s *claimState) error {
	id := s.F.Status.ProviderID
	if s.claim == nil || string(s.claim.UID) != s.F.Spec.NodeClaimUID || !s.claim.DeletionTimestamp.IsZero() || !s.F.DeletionTimestamp.IsZero() ||
		s.claim.Status.ProviderID != "" || id == "" || s.F.Spec.ProviderID != "" || s.claim.Annotations[classconfig.AnnotationProviderID] == id {
		return nil
	}
	patched := s.claim.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[classconfig.AnnotationProviderID] = id
	if err := c.kube.Patch(ctx, patched, client.MergeFrom(s.claim)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("announcing the provider id on the nodeclaim: %w", err)
	}
	return nil
}

// replaceStage asks for a claim that failed for good to be replaced, also when an earlier
// attempt to delete it did not go through.
type replaceStage struct{}

func (replaceStage) reconcile(_ context.Context, s *claimState) (reconcile.Result, error) {
	s.Replace = s.Replace || failed(s)
	return reconcile.Result{}, nil
}

// failed reports whether a stage condition of the claim is False (it is being replaced).
func failed(s *claimState) bool {
	for _, t := range []string{v1alpha1.ConditionApplied, v1alpha1.ConditionJoined} {
		if c := s.Conds.Get(t); c != nil && c.IsFalse() {
			return true
		}
	}
	return false
}

func mergeResults(a, b reconcile.Result) reconcile.Result {
	if b.RequeueAfter > 0 && (a.RequeueAfter == 0 || b.RequeueAfter < a.RequeueAfter) {
		a.RequeueAfter = b.RequeueAfter
	}
	return a
}

// deleteClaim asks Karpenter to replace the claim (it plans again and calls Delete).
func deleteClaim(ctx context.Context, kube client.Client, s *claimState) error {
	if s.claim == nil || !s.claim.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := kube.Delete(ctx, s.claim); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting nodeclaim: %w", err)
	}
	return nil
}
