// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package cloudprovider is Karpenter's seam of the fulfiller: the CloudProvider (Create
// decides and records, the Fulfillment controller does the slow work), the instance types of
// a class with their offerings and the offerings that recently failed, and the drift hash.
package cloudprovider

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/operator/options"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// ProviderName is the CloudProvider's name in Karpenter's metrics.
const ProviderName = "fulfiller"

var resourcePods110 = resource.MustParse("110")

// Options are what the CloudProvider is built from.
type Options struct {
	// Kube reads through the manager's cache and writes.
	Kube  client.Client
	Clock clock.Clock
	// APIReader reads a Fulfillment past the cache (default Kube), when the claim says its
	// provider ID is known and the cache may not have it yet, and a pool's leases.
	APIReader   client.Reader
	Unavailable *UnavailableOfferings
	// StateNamespace holds the states of classes that name no namespace (recorded in each
	// claim's settings), and the pools' leases.
	StateNamespace string
	// Families, when set, lets Create lease machines of the classes whose family is a Pool.
	Families family.Registry
	// RepairToleration is how long a Node's Ready condition may be False or Unknown before
	// the repair policies replace it (0: DefaultRepairToleration).
	RepairToleration time.Duration
	// Overlays, when set, are Karpenter's NodeOverlays (the operator's InstanceTypeStore):
	// while the NodeOverlay gate is on, Create ranks a claim's offerings by the prices they
	// give for the claim's NodePool.
	Overlays Overlays
}

// Overlays give a NodePool's instance types with its NodeOverlays applied (Karpenter's
// nodeoverlay.InstanceTypeStore): the same types in the same order, each a copy where an
// overlay changed it, or an UnevaluatedNodePoolError while the pool's overlays have not been
// evaluated yet.
type Overlays interface {
	ApplyAll(nodePool string, its []*cloudprovider.InstanceType) ([]*cloudprovider.InstanceType, error)
}

// DefaultRepairToleration is how long a Node may be NotReady before it is repaired, unless
// the operator sets another (the controller's --repair-toleration).
const DefaultRepairToleration = 30 * time.Minute

// CloudProvider implements Karpenter's CloudProvider on Fulfillments: Create decides and
// records, the Fulfillment controller does the slow work.
type CloudProvider struct {
	kube        client.Client
	clock       clock.Clock
	unavailable *UnavailableOfferings
	// stateNamespace holds the states of classes that name no namespace (recorded in each
	// claim's settings).
	stateNamespace string
	// reader reads a Fulfillment past the cache (default kube), when the claim says its
	// provider ID is known and the cache may not have it yet.
	reader client.Reader
	// repairToleration is the repair policies' toleration (Options.RepairToleration).
	repairToleration time.Duration
	// overlays are the NodeOverlays Create ranks by (Options.Overlays; nil: none).
	overlays Overlays

	// pools lease machines of the classes whose family is a finite pool (Options.Families).
	pools *classconfig.Pools
	// families give a claim's labels besides the zone label that name its zone in its cloud
	// (family.ZoneLabels).
	families family.Registry

	mu    sync.Mutex
	cache map[types.UID]cachedTypes
}

type cachedTypes struct {
	generation int64
	// catalog is the version of the class's resolved catalogue (empty for spec.nodeTypes).
	catalog string
	seq     uint64
	types   []*cloudprovider.InstanceType
}

var _ cloudprovider.CloudProvider = (*CloudProvider)(nil)

// New builds the CloudProvider.
func New(o Options) *CloudProvider {
	c := &CloudProvider{kube: o.Kube, reader: o.Kube, clock: o.Clock, unavailable: o.Unavailable, stateNamespace: o.StateNamespace,
		repairToleration: cmp.Or(o.RepairToleration, DefaultRepairToleration), families: o.Families, overlays: o.Overlays, cache: map[types.UID]cachedTypes{}}
	if o.APIReader != nil {
		c.reader = o.APIReader
	}
	if o.Families != nil {
		c.pools = &classconfig.Pools{Families: o.Families, Reader: c.reader, Writer: o.Kube, StateNamespace: o.StateNamespace, Cache: o.Kube}
	}
	return c
}

func (c *CloudProvider) Name() string { return ProviderName }

func (c *CloudProvider) GetSupportedNodeClasses() []status.Object {
	return []status.Object{&v1alpha1.TofuNodeClass{}}
}

// Create is fast and idempotent: the Fulfillment named after the claim is the record of what
// was decided, so a second call (after a restart) returns the same answer and starts nothing.
func (c *CloudProvider) Create(ctx context.Context, claim *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	start := c.clock.Now()
	nc, err := c.nodeClass(ctx, claim.Spec.NodeClassRef.Name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("nodeclass %s not found", claim.Spec.NodeClassRef.Name))
		}
		return nil, fmt.Errorf("reading nodeclass: %w", err)
	}
	f, err := c.recorded(ctx, claim)
	switch {
	case apierrors.IsNotFound(err):
		// Only a new decision needs a Ready class: a claim decided already gets its answer
		// whatever the class's readiness now, so a class that flips while the apply runs does
		// not get the claim deleted.
		if err := readyForNewClaims(nc); err != nil {
			return nil, err
		}
		if f, err = c.decide(ctx, nc, claim); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("reading fulfillment: %w", err)
	case f.Spec.NodeClaimUID != string(claim.UID):
		return nil, conflictError(f)
	}
	nt, ok := nc.NodeType(f.Spec.NodeType)
	if !ok {
		return nil, cloudprovider.NewCreateError(fmt.Errorf("node type %s is gone from nodeclass %s", f.Spec.NodeType, nc.Name),
			v1alpha1.ReasonNodeTypeNotFound, "the chosen node type is no longer in the nodeclass")
	}
	providerID, outcome, err := c.providerID(ctx, claim, f)
	createDuration.WithLabelValues(outcome).Observe(c.clock.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	return c.hydrate(claim, nc, nt, f, providerID)
}

// recorded is the claim's record, its Fulfillment, from the cache.
func (c *CloudProvider) recorded(ctx context.Context, claim *karpv1.NodeClaim) (*v1alpha1.Fulfillment, error) {
	f := &v1alpha1.Fulfillment{}
	return f, c.kube.Get(ctx, client.ObjectKey{Name: claim.Name}, f)
}

// readyForNewClaims is nil when the class may launch a new claim. While its checks have not
// answered (Ready Unknown: a class applied together with its NodePool, or re-checking) it is
// a CreateError, which Karpenter retries; NodeClassNotReady, on which Karpenter deletes the
// claim, only once Ready is False.
func readyForNewClaims(nc *v1alpha1.TofuNodeClass) error {
	switch ready := nc.StatusConditions().Root(); {
	case !nc.DeletionTimestamp.IsZero():
		return cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("nodeclass %s is being deleted", nc.Name))
	case ready.IsTrue():
		return nil
	case ready == nil || ready.IsUnknown():
		return cloudprovider.NewCreateError(fmt.Errorf("nodeclass %s: readiness not known yet", nc.Name),
			v1alpha1.ReasonNodeClassReadinessUnknown, "the nodeclass's checks have not answered yet")
	default:
		return cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("nodeclass %s is not ready: %s", nc.Name, ready.Message))
	}
}

// providerID is the claim's provider ID: predicted (spec) or reported by the apply (status),
// and which of them (createDuration's label). Create does not wait for an apply: while the
// provider ID is unknown it returns a CreateError at once (Launched stays Unknown, reason
// AwaitingProviderID; Karpenter retries with its backoff), and once the apply reports it the
// Fulfillment controller announces it on the claim (AnnotationProviderID), whose update
// makes Karpenter call Create again at once.
func (c *CloudProvider) providerID(ctx context.Context, claim *karpv1.NodeClaim, f *v1alpha1.Fulfillment) (string, string, error) {
	if f.Spec.ProviderID != "" {
		return f.Spec.ProviderID, createTemplate, nil
	}
	if f.Status.ProviderID != "" {
		return f.Status.ProviderID, createReported, nil
	}
	if claim.Annotations[classconfig.AnnotationProviderID] != "" {
		fresh := &v1alpha1.Fulfillment{}
		if err := c.reader.Get(ctx, client.ObjectKeyFromObject(f), fresh); err != nil {
			return "", createAwaiting, fmt.Errorf("reading fulfillment: %w", err)
		}
		if fresh.Spec.NodeClaimUID == string(claim.UID) && fresh.Status.ProviderID != "" {
			return fresh.Status.ProviderID, createReported, nil
		}
	}
	return "", createAwaiting, cloudprovider.NewCreateError(errors.New("waiting for the module's provider_id output"),
		v1alpha1.ReasonAwaitingProviderID, "the apply has not reported the machine's provider ID yet; the claim launches once it has")
}

// decide chooses the offering and records the Fulfillment.
func (c *CloudProvider) decide(ctx context.Context, nc *v1alpha1.TofuNodeClass, claim *karpv1.NodeClaim) (*v1alpha1.Fulfillment, error) {
	all, err := c.instanceTypes(nc)
	if err != nil {
		return nil, cloudprovider.NewNodeClassNotReadyError(err)
	}
	its, exhausted, err := c.withPoolOffers(ctx, nc, all)
	if err != nil {
		return nil, err
	}
	overlaid, err := c.overlaid(ctx, claim, its)
	if err != nil {
		return nil, err
	}
	ch, err := chooseOffering(nc, its, overlaid, claim)
	if err != nil && len(exhausted) > 0 {
		err = fmt.Errorf("%s: %w; the pool has no free machine of node types %s", v1alpha1.ReasonPoolExhausted, err, strings.Join(exhausted, ", "))
	}
	if err != nil {
		return nil, cloudprovider.NewInsufficientCapacityError(err)
	}
	f, err := c.fulfillmentFor(nc, claim, ch.nodeType, ch.zone, ch.capType, ch.offering.Price)
	if err != nil {
		return nil, err
	}
	if f, err = c.leaseFor(ctx, nc, claim, f, all, overlaid); err != nil {
		return nil, err
	}
	// The record is written before the answer: once Create has answered, Karpenter does not
	// call it again for the launched claim, and only the record makes a machine for it.
	if err := c.kube.Create(ctx, f); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating fulfillment: %w", err)
		}
		// An earlier Create of this claim wrote it and the cache does not show it yet, or an
		// earlier claim's Fulfillment of that name is still being destroyed.
		got := &v1alpha1.Fulfillment{}
		if err := c.reader.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			return nil, fmt.Errorf("reading fulfillment: %w", err)
		}
		if got.Spec.NodeClaimUID != string(claim.UID) {
			return nil, conflictError(got)
		}
		return got, nil
	}
	return f, nil
}

// overlaid are the claim's NodePool's instance types its as the NodePool's NodeOverlays make
// them, by name; nil when no overlay applies (no store, the NodeOverlay gate off, or no
// overlay selects the pool). While Karpenter has not evaluated the pool's overlays yet it is
// a CreateError, which Karpenter retries.
func (c *CloudProvider) overlaid(ctx context.Context, claim *karpv1.NodeClaim, its []*cloudprovider.InstanceType) (map[string]*cloudprovider.InstanceType, error) {
	if c.overlays == nil || !options.FromContext(ctx).FeatureGates.NodeOverlay {
		return nil, nil
	}
	pool := claim.Labels[karpv1.NodePoolLabelKey]
	out, err := c.overlays.ApplyAll(pool, its)
	if err != nil {
		if cloudprovider.IsUnevaluatedNodePoolError(err) {
			return nil, cloudprovider.NewCreateError(fmt.Errorf("the nodeoverlays of nodepool %s have not been evaluated yet", pool),
				v1alpha1.ReasonOverlaysNotEvaluated, "Karpenter has not evaluated the nodepool's nodeoverlays yet")
		}
		return nil, fmt.Errorf("applying the nodeoverlays of nodepool %s: %w", pool, err)
	}
	byName := make(map[string]*cloudprovider.InstanceType, len(out))
	for _, it := range out {
		byName[it.Name] = it
	}
	return byName, nil
}

// conflictError: the claim's Fulfillment name is taken by an earlier claim's, still being
// destroyed.
func conflictError(f *v1alpha1.Fulfillment) error {
	return cloudprovider.NewCreateError(fmt.Errorf("fulfillment %s belongs to another nodeclaim (uid %s)", f.Name, f.Spec.NodeClaimUID),
		v1alpha1.ReasonFulfillmentConflict, "a fulfillment of that name belongs to an earlier nodeclaim and is being destroyed")
}

// fulfillmentFor is the record of the decision to launch the claim as a node of type nt in
// zone, of capacity type capType, at price.
func (c *CloudProvider) fulfillmentFor(nc *v1alpha1.TofuNodeClass, claim *karpv1.NodeClaim, nt *v1alpha1.NodeType, zone, capType string, price float64) (*v1alpha1.Fulfillment, error) {
	key, err := statelock.KeyFor(claim.Name)
	if err != nil {
		return nil, cloudprovider.NewCreateError(err, v1alpha1.ReasonInvalidClaimName, err.Error())
	}
	module, version, digest, err := moduleFor(nc, nt)
	if err != nil {
		return nil, err
	}
	f := &v1alpha1.Fulfillment{
		ObjectMeta: metav1.ObjectMeta{
			Name:       claim.Name,
			Labels:     map[string]string{keys.LabelNodeClaim: claim.Name, karpv1.NodePoolLabelKey: claim.Labels[karpv1.NodePoolLabelKey]},
			Finalizers: []string{classconfig.FinalizerDestroy},
		},
		Spec: v1alpha1.FulfillmentSpec{
			NodeClaimUID:  string(claim.UID),
			NodeClass:     nc.Name,
			NodePool:      claim.Labels[karpv1.NodePoolLabelKey],
			NodeType:      nt.Name,
			Zone:          zone,
			CapacityType:  capType,
			Price:         fmt.Sprintf("%g", price),
			NodeName:      claim.Name,
			ProviderID:    providerIDFor(nt, claim.Name),
			StateKey:      string(key),
			Module:        module,
			ModuleVersion: version,
			ModuleDigest:  digest,
			Hash:          nodeHash(nc, nt),
		},
	}
	f.Spec.Settings = classconfig.SettingsFor(nc, nt, f, c.stateNamespace)
	return f, nil
}

// hydrate is the claim as Create returns it: provider ID, labels of the chosen offering,
// capacity and allocatable, and the drift hash with its parts.
func (c *CloudProvider) hydrate(claim *karpv1.NodeClaim, nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType, f *v1alpha1.Fulfillment, providerID string) (*karpv1.NodeClaim, error) {
	it, err := instanceType(nt, nil)
	if err != nil {
		return nil, cloudprovider.NewNodeClassNotReadyError(err)
	}
	out := claim.DeepCopy()
	out.Labels = classconfig.NodeLabels(nt, f)
	maps.Copy(out.Labels, c.families.NodeZoneLabels(nc.Spec.Family, f.Spec.Zone))
	out.Annotations = map[string]string{AnnotationHash: f.Spec.Hash, AnnotationHashVersion: HashVersion}
	if nodeHash(nc, nt) == f.Spec.Hash { // else the class changed since f was recorded: its parts are gone
		out.Annotations[AnnotationHashParts] = hashParts(nc, nt)
	}
	out.Status.ProviderID = providerID
	out.Status.Capacity = it.Capacity
	out.Status.Allocatable = it.Allocatable()
	return out, nil
}

func providerIDFor(nt *v1alpha1.NodeType, nodeName string) string {
	if nt.ProviderIDTemplate == "" {
		return ""
	}
	return strings.ReplaceAll(nt.ProviderIDTemplate, "{name}", nodeName)
}

// moduleFor is the module a claim of node type nt records: the type's module (its own, else
// the class's) pinned to what the class last resolved it to (a registry source with the
// exact version its constraint resolved to), and its content's digest. A local source the
// class has not resolved yet is recorded as it is, without a digest; a remote one must have
// been resolved.
func moduleFor(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) (source, version, digest string, err error) {
	m := nc.ModuleFor(nt)
	st, ok := nc.ModuleStatusOf(m)
	switch {
	case ok && st.Pinned != "":
		return st.Pinned, st.Version, st.Digest, nil
	case ok:
		return m.Source, st.Version, st.Digest, nil
	case tfrunner.IsLocalSource(m.Source):
		return m.Source, "", "", nil
	}
	return "", "", "", cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("the class's module source %s has not been resolved yet%s", m.Source, constraintNote(m)))
}

func constraintNote(m v1alpha1.ModuleSource) string {
	if m.Version == "" || !tfrunner.IsRegistrySource(m.Source) {
		return ""
	}
	return " with version " + m.Version
}

// Delete starts the destroy (the Fulfillment's finalizer runs it) and reports NotFound only
// once the machine is destroyed and its state removed. It first records on the Fulfillment
// that Karpenter called it: a Fulfillment deleted by someone else waits for that.
func (c *CloudProvider) Delete(ctx context.Context, claim *karpv1.NodeClaim) error {
	f := &v1alpha1.Fulfillment{}
	if err := c.kube.Get(ctx, client.ObjectKey{Name: claim.Name}, f); err != nil {
		if apierrors.IsNotFound(err) {
			return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("fulfillment %s is gone", claim.Name))
		}
		return fmt.Errorf("reading fulfillment: %w", err)
	}
	if _, ok := f.Annotations[v1alpha1.AnnotationDeleteCalled]; !ok {
		patched := f.DeepCopy()
		metav1.SetMetaDataAnnotation(&patched.ObjectMeta, v1alpha1.AnnotationDeleteCalled, c.clock.Now().UTC().Format(time.RFC3339))
		if err := c.kube.Patch(ctx, patched, client.MergeFrom(f)); err != nil {
			if apierrors.IsNotFound(err) {
				return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("fulfillment %s is gone", claim.Name))
			}
			return fmt.Errorf("recording the delete on fulfillment: %w", err)
		}
		f = patched
	}
	if f.DeletionTimestamp.IsZero() {
		if err := c.kube.Delete(ctx, f); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting fulfillment: %w", err)
		}
	}
	return nil
}

// Get finds the claim of a provider ID; NotFound only when no machine can exist for it.
func (c *CloudProvider) Get(ctx context.Context, providerID string) (*karpv1.NodeClaim, error) {
	list := &v1alpha1.FulfillmentList{}
	if err := c.kube.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing fulfillments: %w", err)
	}
	for i := range list.Items {
		f := &list.Items[i]
		if fulfillmentProviderID(f) == providerID && !f.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed) {
			return toNodeClaim(f), nil
		}
	}
	return nil, cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("no machine with provider id %s", providerID))
}

// List returns every machine that may exist, from the Fulfillments; an error rather than a
// partial list.
func (c *CloudProvider) List(ctx context.Context) ([]*karpv1.NodeClaim, error) {
	list := &v1alpha1.FulfillmentList{}
	if err := c.kube.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing fulfillments: %w", err)
	}
	out := make([]*karpv1.NodeClaim, 0, len(list.Items))
	for i := range list.Items {
		f := &list.Items[i]
		if fulfillmentProviderID(f) == "" || f.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed) {
			continue
		}
		out = append(out, toNodeClaim(f))
	}
	return out, nil
}

func fulfillmentProviderID(f *v1alpha1.Fulfillment) string {
	if f.Status.ProviderID != "" {
		return f.Status.ProviderID
	}
	return f.Spec.ProviderID
}

func toNodeClaim(f *v1alpha1.Fulfillment) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:              f.Name,
			CreationTimestamp: f.CreationTimestamp,
			DeletionTimestamp: f.DeletionTimestamp,
			Labels: map[string]string{
				corev1.LabelInstanceTypeStable: f.Spec.NodeType,
				corev1.LabelTopologyZone:       f.Spec.Zone,
				karpv1.CapacityTypeLabelKey:    f.Spec.CapacityType,
			},
		},
		Status: karpv1.NodeClaimStatus{ProviderID: fulfillmentProviderID(f)},
	}
}

// GetInstanceTypes lists every node type of the pool's NodeClass, cached per NodeClass
// generation, catalogue version and unavailable-offerings change. A class whose catalogue
// has not resolved yet is an error, never an empty list: Karpenter skips the pool instead of
// concluding that nothing fits.
func (c *CloudProvider) GetInstanceTypes(ctx context.Context, pool *karpv1.NodePool) ([]*cloudprovider.InstanceType, error) {
	if pool.Spec.Template.Spec.NodeClassRef == nil {
		return nil, fmt.Errorf("nodepool %s has no nodeClassRef", pool.Name)
	}
	nc, err := c.nodeClass(ctx, pool.Spec.Template.Spec.NodeClassRef.Name)
	if err != nil {
		return nil, fmt.Errorf("reading nodeclass of nodepool %s: %w", pool.Name, err)
	}
	its, err := c.instanceTypes(nc)
	if err != nil {
		return nil, err
	}
	its, _, err = c.withPoolOffers(ctx, nc, its)
	return its, err
}

func (c *CloudProvider) instanceTypes(nc *v1alpha1.TofuNodeClass) ([]*cloudprovider.InstanceType, error) {
	seq := c.unavailable.SeqNum()
	c.mu.Lock()
	defer c.mu.Unlock()
	version := ""
	if nc.Status.Catalog != nil {
		version = nc.Status.Catalog.Version
	}
	if hit, ok := c.cache[nc.UID]; ok && hit.generation == nc.Generation && hit.catalog == version && hit.seq == seq {
		return hit.types, nil
	}
	if len(nc.NodeTypes()) == 0 {
		return nil, cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("the catalogue of nodeclass %s has not resolved to node types yet", nc.Name))
	}
	its, err := instanceTypes(nc, c.unavailable)
	if err != nil {
		return nil, err
	}
	c.cache[nc.UID] = cachedTypes{generation: nc.Generation, catalog: version, seq: seq, types: its}
	return its, nil
}

// IsDrifted compares the hash stamped on the claim at Create with the NodeClass as it is now,
// and names the parts that differ (driftReason): the reason of the claim's Drifted condition.
func (c *CloudProvider) IsDrifted(ctx context.Context, claim *karpv1.NodeClaim) (cloudprovider.DriftReason, error) {
	if claim.Annotations[AnnotationHashVersion] != HashVersion {
		return "", nil
	}
	nc, err := c.nodeClass(ctx, claim.Spec.NodeClassRef.Name)
	if err != nil {
		return "", client.IgnoreNotFound(err)
	}
	nt, ok := nc.NodeType(claim.Labels[corev1.LabelInstanceTypeStable])
	if !ok {
		return "", nil // core reports InstanceTypeNotFound itself
	}
	if claim.Annotations[AnnotationHash] != nodeHash(nc, nt) {
		return driftReason(claim.Annotations[AnnotationHashParts], hashParts(nc, nt)), nil
	}
	return "", nil
}

// RepairPolicies replace nodes whose kubelet stopped reporting for the repair toleration
// (Options.RepairToleration); boot time is not counted (a node registers Ready or not at all). Karpenter (v1.15.0,
// pkg/controllers/node/health) wants exactly one policy with an empty reason regex, the
// fallback of every listed condition; Ready=Unknown matches any reason explicitly.
func (c *CloudProvider) RepairPolicies() []cloudprovider.RepairPolicy {
	toleration := c.repairToleration
	return []cloudprovider.RepairPolicy{
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionFalse, TolerationDuration: toleration, Action: cloudprovider.ReplaceNode},
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionUnknown, ReasonRegex: ".*", TolerationDuration: toleration, Action: cloudprovider.ReplaceNode},
	}
}

func (c *CloudProvider) Reboot(context.Context, *karpv1.NodeClaim, string) error {
	return cloudprovider.NewNodeRebootNotImplementedError()
}

func (c *CloudProvider) nodeClass(ctx context.Context, name string) (*v1alpha1.TofuNodeClass, error) {
	nc := &v1alpha1.TofuNodeClass{}
	if err := c.kube.Get(ctx, client.ObjectKey{Name: name}, nc); err != nil {
		return nil, err
	}
	return nc, nil
}
