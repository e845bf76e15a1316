// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package nodeclass keeps each TofuNodeClass's status: its checks (spec, module, backend,
// credentials, catalogue, join preflight, launchable types, and its family's own), each a
// condition Ready is composed of, and its finalizer, which keeps the class while claims
// reference it.
package nodeclass

import (
	"context"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/preflight"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Controller keeps a TofuNodeClass's Ready condition true only while the class can launch
// nodes: a valid spec and a module that keeps the module contract, checked statically so
// that a broken module is a condition here, not a failed node at 3 a.m.
type Controller struct {
	kube     client.Client
	clock    clock.Clock
	recorder events.Recorder
	// preflight checks that the cluster lets machines join (preflight.Check).
	preflight func(context.Context) (*preflight.Failure, error)
	// apiReader reads from the API server, uncached: the Secrets of the class's backend and
	// credentials, in secretNamespace (the fulfiller's).
	apiReader       client.Reader
	secretNamespace string
	// families are the node-type families the controller knows; a class's family adds its
	// checks (family.ClassChecker) and checks its credentials (family.CredentialsChecker).
	families family.Registry
	// cluster is this cluster's name, the value of the cluster label (family.Scope).
	cluster string
	// credentialChecks remembers the family's verdict on each class's credentials, so that
	// its API is asked at most every credentialsRecheck.
	credentialChecks *verdictCache
	// catalogs remembers what each catalogue class's family catalogue last read.
	catalogs *catalogReads
	// modules resolves the classes' module sources.
	modules *moduleResolver
}

// Re-check intervals: a class that is not Ready is looked at often, so it recovers soon after
// the cluster is fixed; a Ready one notices a cluster that changed under it.
const (
	notReadyRecheck = 20 * time.Second
	readyRecheck    = 5 * time.Minute
)

// Options are what the controller is built from.
type Options struct {
	Kube client.Client
	// APIReader reads uncached: cluster-info, and the Secrets classes name.
	APIReader client.Reader
	Clock     clock.Clock
	Recorder  events.Recorder
	// SecretNamespace holds the Secrets classes refer to (the fulfiller's namespace): the pg
	// connection string, the state encryption key and the credentials.
	SecretNamespace string
	// Families are the node-type families a class may name; Cluster is this cluster's name.
	Families family.Registry
	Cluster  string
	// TokenAuthProbe, when set, adds to the join preflight a check that the API server at it
	// authenticates bootstrap tokens (see preflight.TokenAuthProbe), run once the
	// authorizer's answers are fine and at most every 5 minutes.
	TokenAuthProbe *rest.Config
	// TofuPath is the tofu binary that fetches remote module sources (empty: tofu on PATH);
	// ModuleDir is where the fetches are kept (empty: a folder under the temporary folder);
	// ModuleRefresh how often a source is resolved again (0: DefaultModuleRefresh).
	TofuPath      string
	ModuleDir     string
	ModuleRefresh time.Duration
}

// NewController builds the controller.
func NewController(o Options) *Controller {
	c := &Controller{kube: o.Kube, clock: o.Clock, recorder: o.Recorder, apiReader: o.APIReader, secretNamespace: o.SecretNamespace,
		families: o.Families, cluster: o.Cluster, credentialChecks: newVerdictCache(o.Clock), catalogs: newCatalogReads(),
		modules: newModuleResolver(o.Clock, o.TofuPath, o.ModuleDir, o.ModuleRefresh)}
	if o.Kube != nil {
		gauges.source.Store(&classSource{kube: o.Kube, clock: o.Clock})
	}
	c.preflight = func(ctx context.Context) (*preflight.Failure, error) {
		return preflight.Check(ctx, o.Kube, o.APIReader)
	}
	if o.TokenAuthProbe != nil {
		probe := &preflight.TokenAuthProbe{Client: o.Kube, Config: o.TokenAuthProbe}
		authorizer := c.preflight
		c.preflight = func(ctx context.Context) (*preflight.Failure, error) {
			if failure, err := authorizer(ctx); failure != nil || err != nil {
				return failure, err
			}
			return probe.Check(ctx, c.clock.Now())
		}
	}
	return c
}

func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("nodeclass.status").
		For(&v1alpha1.TofuNodeClass{}).
		// A deleted Fulfillment may let its terminating class go.
		Watches(&v1alpha1.Fulfillment{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.(*v1alpha1.Fulfillment).Spec.NodeClass}}}
		}), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false }, DeleteFunc: func(event.DeleteEvent) bool { return true },
		})).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}

func (c *Controller) Reconcile(ctx context.Context, nc *v1alpha1.TofuNodeClass) (reconcile.Result, error) {
	if !nc.DeletionTimestamp.IsZero() {
		return c.terminate(ctx, nc)
	}
	nc, err := c.ensureFinalizer(ctx, nc)
	if err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return reconcile.Result{}, err
	}
	updated := nc.DeepCopy()
	conds := updated.StatusConditions(status.WithClock(c.clock))
	if updated.Spec.Catalog == nil {
		updated.Status.Catalog = nil
		_ = conds.Clear(v1alpha1.ConditionCatalogReady)
	}
	checks := append(c.checks(updated), c.familyChecks(updated)...)
	order := make([]string, 0, len(checks))
	for _, chk := range checks {
		v, err := chk.check(ctx, updated)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("checking %s: %w", chk.condition, err)
		}
		setVerdict(conds, chk.condition, v)
		if !v.advisory {
			order = append(order, chk.condition)
		}
	}
	// A warning only: a type that cannot register in time is not launchable, but the others
	// are (NodeTypesLaunchable says when none is).
	if misfits, _ := registrationWindowCheck(updated.NodeTypes()); len(misfits) > 0 {
		conds.SetFalse(v1alpha1.ConditionRegistrationWindow, v1alpha1.ReasonExceedsRegistrationWindow, misfitMessage(misfits))
	} else {
		conds.SetTrueWithReason(v1alpha1.ConditionRegistrationWindow, v1alpha1.ReasonFits, "every node type's apply deadline and join timeout fit the registration window")
	}
	classconfig.ShortenConditions(updated.Status.Conditions)
	ready := composeReady(conds, order)
	recheck := readyRecheck
	if !ready.IsTrue() {
		recheck = notReadyRecheck
	}
	recheck = c.catalogRequeue(updated, recheck)
	recheck = min(recheck, c.modules.refresh) // the module source is resolved again then
	updated.Status.NodeTypeCount = len(updated.NodeTypes())
	if equality.Semantic.DeepEqual(nc.Status, updated.Status) {
		return reconcile.Result{RequeueAfter: recheck}, nil
	}
	if err := c.kube.Status().Patch(ctx, updated, client.MergeFromWithOptions(nc, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return reconcile.Result{}, fmt.Errorf("writing nodeclass status: %w", err)
	}
	if before := nc.StatusConditions().Root(); before == nil || before.Status != ready.Status || before.Reason != ready.Reason {
		c.recorder.Publish(classconfig.ShortenEvents([]events.Event{nodeClassEvent(updated, ready.IsTrue(), ready.Reason, ready.Message)})...)
	}
	return reconcile.Result{RequeueAfter: recheck}, nil
}
