// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/preflight"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// NodeClassController keeps a TofuNodeClass's Ready condition true only while the class can
// launch nodes: a valid spec and a module that keeps the module contract, checked statically
// so that a broken module is a condition here, not a failed node at 3 a.m.
type NodeClassController struct {
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
}

// Re-check intervals: a class that is not Ready is looked at often, so it recovers soon after
// the cluster is fixed; a Ready one notices a cluster that changed under it.
const (
	notReadyRecheck = 20 * time.Second
	readyRecheck    = 5 * time.Minute
)

// NewNodeClassController builds the controller; reader reads uncached (cluster-info).
func NewNodeClassController(kube client.Client, reader client.Reader, clk clock.Clock, recorder events.Recorder) *NodeClassController {
	return &NodeClassController{kube: kube, clock: clk, recorder: recorder, apiReader: reader, preflight: func(ctx context.Context) (*preflight.Failure, error) {
		return preflight.Check(ctx, kube, reader)
	}, credentialChecks: newVerdictCache(clk), catalogs: newCatalogReads()}
}

// WithFamilies sets the node-type families a class may name and this cluster's name.
func (c *NodeClassController) WithFamilies(families family.Registry, cluster string) *NodeClassController {
	c.families, c.cluster = families, cluster
	return c
}

// WithTokenAuthProbe adds to the join preflight a check that the API server at cfg
// authenticates bootstrap tokens (see preflight.TokenAuthProbe), run once the authorizer's
// answers are fine and at most every 5 minutes.
func (c *NodeClassController) WithTokenAuthProbe(cfg *rest.Config) *NodeClassController {
	probe := &preflight.TokenAuthProbe{Client: c.kube, Config: cfg}
	authorizer := c.preflight
	c.preflight = func(ctx context.Context) (*preflight.Failure, error) {
		if failure, err := authorizer(ctx); failure != nil || err != nil {
			return failure, err
		}
		return probe.Check(ctx, c.clock.Now())
	}
	return c
}

// WithSecretNamespace sets the namespace of the Secrets classes refer to (the fulfiller's):
// the pg connection string and the state encryption key.
func (c *NodeClassController) WithSecretNamespace(namespace string) *NodeClassController {
	c.secretNamespace = namespace
	return c
}

func (c *NodeClassController) Register(_ context.Context, m manager.Manager) error {
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

// classCheck is one check of a class: the condition it sets, and what decides it. Ready is
// composed of the checks, in order: the generic ones (checks), then those of the class's
// family (familyChecks), each with its own condition.
type classCheck struct {
	condition string
	check     func(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error)
}

// verdict is what one check found: passed, or failed with a reason and a message that say
// what is wrong, or unknown (the check could not be made yet) with a reason and message. An
// advisory verdict sets its condition as a warning that Ready does not count.
type verdict struct {
	passed, unknown, advisory bool
	reason, message           string
}

var passed = verdict{passed: true}

func failedCheck(reason string, err error) verdict {
	return verdict{reason: reason, message: err.Error()}
}

// checks are the class's checks, in the order of v1alpha1.ClassChecks; a class with a
// catalogue has CatalogReady after CredentialsReady. A check may resolve what the class's
// status shows (the catalogue's node types) on the class it is given, which the later checks
// see.
func (c *NodeClassController) checks(nc *v1alpha1.TofuNodeClass) []classCheck {
	checks := []classCheck{
		{v1alpha1.ConditionSpecValid, func(_ context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			if err := validateSpec(&nc.Spec, c.families); err != nil {
				return failedCheck(v1alpha1.ReasonInvalidSpec, err), nil
			}
			return passed, nil
		}},
		{v1alpha1.ConditionModuleValid, func(_ context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			if reason, err := checkModule(nc.Spec.Module.Source); err != nil {
				return failedCheck(reason, err), nil
			}
			return passed, nil
		}},
		{v1alpha1.ConditionBackendReady, func(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			_, err := readBackend(ctx, c.apiReader, c.secretNamespace, nc.Spec.Backend)
			return configVerdict(err)
		}},
		{v1alpha1.ConditionCredentialsReady, func(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			env, err := readCredentials(ctx, c.apiReader, c.secretNamespace, nc.Spec.Credentials)
			if err != nil {
				return configVerdict(err)
			}
			return c.checkFamilyCredentials(ctx, nc, env)
		}},
	}
	if nc.Spec.Catalog != nil {
		checks = append(checks, classCheck{v1alpha1.ConditionCatalogReady, c.catalogCheck})
	}
	return append(checks, []classCheck{
		{v1alpha1.ConditionJoinPreflight, func(ctx context.Context, _ *v1alpha1.TofuNodeClass) (verdict, error) {
			failure, err := c.preflight(ctx)
			switch {
			case err != nil:
				return verdict{}, err
			case failure != nil:
				return verdict{reason: failure.Reason, message: failure.Message}, nil
			}
			return passed, nil
		}},
		{v1alpha1.ConditionNodeTypesLaunchable, func(_ context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			misfits, launchable := registrationWindowCheck(nc.NodeTypes())
			switch {
			case launchable == 0 && len(misfits) == 0:
				return verdict{reason: v1alpha1.ReasonNoTypesSelected, message: "the class has no node types yet"}, nil
			case launchable == 0:
				return verdict{reason: v1alpha1.ReasonExceedsRegistrationWindow, message: misfitMessage(misfits)}, nil
			}
			return verdict{passed: true, reason: v1alpha1.ReasonLaunchable}, nil
		}},
	}...)
}

// configVerdict is the verdict of reading the class's Secrets: a ConfigError fails the check
// with its reason, another error is the reconcile's.
func configVerdict(err error) (verdict, error) {
	if err == nil {
		return passed, nil
	}
	if ce, ok := asConfigError(err); ok {
		return verdict{reason: ce.Reason, message: ce.Message}, nil
	}
	return verdict{}, err
}

func (c *NodeClassController) Reconcile(ctx context.Context, nc *v1alpha1.TofuNodeClass) (reconcile.Result, error) {
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
	shortenMessages(updated.Status.Conditions)
	ready := composeReady(conds, order)
	recheck := readyRecheck
	if !ready.IsTrue() {
		recheck = notReadyRecheck
	}
	recheck = c.catalogRequeue(updated, recheck)
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
		c.recorder.Publish(shortenEventMessages([]events.Event{nodeClassEvent(updated, ready.IsTrue(), ready.Reason, ready.Message)})...)
	}
	return reconcile.Result{RequeueAfter: recheck}, nil
}

// setVerdict sets a check's condition.
func setVerdict(conds status.ConditionSet, condition string, v verdict) {
	switch {
	case v.unknown:
		conds.SetUnknownWithReason(condition, v.reason, v.message)
	case !v.passed:
		conds.SetFalse(condition, v.reason, v.message)
	case v.reason != "":
		conds.SetTrueWithReason(condition, v.reason, v.message)
	default:
		conds.SetTrue(condition)
	}
}

// composeReady sets Ready from the checks' conditions, in order: True when all are, otherwise
// the status, reason and message of the first that is not, so that `kubectl get
// tofunodeclasses` says what is wrong.
func composeReady(conds status.ConditionSet, order []string) *status.Condition {
	for _, t := range order {
		switch c := conds.Get(t); {
		case c == nil:
			conds.SetUnknown(status.ConditionReady)
			return conds.Root()
		case !c.IsTrue():
			conds.Set(status.Condition{Type: status.ConditionReady, Status: c.Status, Reason: c.Reason, Message: c.Message})
			return conds.Root()
		}
	}
	conds.SetTrue(status.ConditionReady)
	return conds.Root()
}

// misfitMessage names the node types that cannot register within Karpenter's window.
func misfitMessage(misfits []string) string {
	return fmt.Sprintf("node types %s cannot register within Karpenter's %s registration window; they are not launchable",
		strings.Join(misfits, ", "), shortDuration(registrationWindow))
}

// validateSpec checks what the CRD schema cannot: a family this binary knows, prices,
// capacities, unique zones.
func validateSpec(spec *v1alpha1.TofuNodeClassSpec, families family.Registry) error {
	var errs []error
	if !families.Knows(spec.Family) {
		errs = append(errs, fmt.Errorf("family %s is not built into this controller (it knows %s)", spec.Family, strings.Join(families.Names(), ", ")))
	}
	for _, nt := range spec.NodeTypes {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := nt.Capacity[r]; !ok || q.Sign() <= 0 {
				errs = append(errs, fmt.Errorf("node type %s: capacity.%s must be set and positive", nt.Name, r))
			}
		}
		seen := map[string]bool{}
		for _, o := range nt.Offerings {
			key := o.Zone + "/" + o.CapacityTypeOrDefault()
			if seen[key] {
				errs = append(errs, fmt.Errorf("node type %s: offering %s listed twice", nt.Name, key))
			}
			seen[key] = true
			if _, err := strconv.ParseFloat(o.Price, 64); err != nil {
				errs = append(errs, fmt.Errorf("node type %s: offering %s: price %q is not a number", nt.Name, o.Zone, o.Price))
			}
		}
		if nt.JoinTimeout != nil && nt.JoinTimeout.Duration <= 0 {
			errs = append(errs, fmt.Errorf("node type %s: joinTimeout must be positive", nt.Name))
		}
		for name, d := range map[string]*metav1.Duration{"apply": nt.Deadlines.Apply, "cni": nt.Deadlines.CNI, "gpu": nt.Deadlines.GPU, "custom": nt.Deadlines.Custom} {
			if d != nil && d.Duration <= 0 {
				errs = append(errs, fmt.Errorf("node type %s: deadlines.%s must be positive", nt.Name, name))
			}
		}
		errs = append(errs, checkKubeletArgs("node type "+nt.Name, nt.KubeletExtraArgs)...)
		errs = append(errs, validateNodeTypeValues(&nt)...)
		if err := reservations(&nt).Validate(); err != nil {
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				errs = append(errs, fmt.Errorf("node type %s: %w", nt.Name, e))
			}
		}
		if nt.ProviderIDFrom != nil && nt.ProviderIDTemplate != "" {
			errs = append(errs, fmt.Errorf("node type %s: providerIDTemplate and providerIDFrom exclude each other", nt.Name))
		} else if src := providerIDSource(&nt, nt.ProviderIDTemplate); src != nil {
			if err := src.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("node type %s: providerIDFrom: %w", nt.Name, err))
			}
		}
		if nt.UserDataLimit != nil && nt.UserDataLimit.Sign() <= 0 {
			errs = append(errs, fmt.Errorf("node type %s: userDataLimit must be positive", nt.Name))
		}
	}
	errs = append(errs, checkKubeletArgs("bootstrap", spec.Bootstrap.KubeletExtraArgs)...)
	if err := bootstrap.ValidateExtraCloudConfig(spec.Bootstrap.ExtraCloudConfig); err != nil {
		errs = append(errs, fmt.Errorf("bootstrap.extraCloudConfig: %w", err))
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

func checkKubeletArgs(where string, args []v1alpha1.KubeletArg) []error {
	errs := checkKubeletArgValues(where, args)
	for _, a := range args {
		if slices.Contains(reservedKubeletArgs, a.Name) {
			errs = append(errs, fmt.Errorf("%s: kubelet arg %s is set by the fulfiller", where, a.Name))
		}
	}
	return errs
}

// registrationWindowCheck names the node types whose apply deadline and join timeout cannot
// fit Karpenter's fixed 15-minute registration window: Karpenter would delete their claims
// before a slow machine registers, so their offerings are not launchable.
func registrationWindowCheck(nodeTypes []v1alpha1.NodeType) (misfits []string, launchable int) {
	for i := range nodeTypes {
		if ok, why := registrationFit(&nodeTypes[i]); !ok {
			misfits = append(misfits, why)
		} else {
			launchable++
		}
	}
	return misfits, launchable
}

// checkModule reads the module's HCL and checks the module contract.
func checkModule(source string) (string, error) {
	if !filepath.IsAbs(source) {
		return v1alpha1.ReasonModuleNotFound, fmt.Errorf("module source %q must be an absolute path", source)
	}
	if info, err := os.Stat(source); err != nil || !info.IsDir() {
		return v1alpha1.ReasonModuleNotFound, fmt.Errorf("module source %s is not a folder", source)
	}
	mod, err := tfrunner.InspectModule(source)
	if err != nil {
		return v1alpha1.ReasonInvalidModule, err
	}
	if err := mod.CheckContract(); err != nil {
		return v1alpha1.ReasonInvalidModule, err
	}
	return "", nil
}
