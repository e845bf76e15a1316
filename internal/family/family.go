// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package family is the seam between the generic fulfiller and the node-type families (the
// simulated type, Hetzner Cloud, KubeVirt, Hetzner Robot). A TofuNodeClass names its family
// in spec.family; the generic code knows no family by name and asks it, through the small
// optional capabilities below, what only it can know: its catalogue of node types, the
// machines it can prove are this cluster's, whether its credentials work, why a machine has
// not joined, and what its cloud's errors mean.
//
// A family is production code in internal/providers/<family> and implements Family plus any
// of the capabilities; the generic code discovers them by type assertion. The binaries build
// one Registry of the families they know and hand it to the controllers and the runner: there
// is no global registry.
package family

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// Family is a node-type family. Its name is a value of TofuNodeClass spec.family.
type Family interface {
	Name() string
}

// Scope is what a family call may use: the class, the environment its runs get (its
// spec.credentials; never logged, never put into an error), and this cluster's name, the
// value of the cluster label on every machine the fulfiller makes.
type Scope struct {
	Class   *v1alpha1.TofuNodeClass
	Env     map[string]string
	Cluster string
	// Reader reads from the API server (not a cache), Writer writes; StateNamespace is where
	// the claims' states live, and a Pool's leases. Set for Pool calls.
	Reader         client.Reader
	Writer         client.Client
	StateNamespace string
	// Spend, when set, is told of each request a call makes against an API budget its cloud
	// enforces (the budget APIBudgets names for the class's runs), so that runs are admitted
	// against what the calls left. The orphan collector sets it: its listings and deletes
	// draw on the same budget as the runs.
	Spend func(executor.APIDemand)
	// Occupied, set for a Pool's Offer and Lease, says whether a Node or a NodeClaim still
	// carries a provider ID. A pool machine's provider ID outlives its lease (hrobot://<n>
	// names the server, whoever holds it), and Karpenter matches a claim to its Node, and
	// keeps its cluster state, by provider ID: a claim given a machine whose previous Node
	// is still terminating would take that Node for its own and never see its own join. A
	// Pool offers and leases no machine whose provider ID is occupied.
	Occupied func(ctx context.Context, providerID string) (bool, error)
}

// Catalogue (optional) offers node types from the family's own catalogue (its cloud's server
// types and prices) for classes that select their types (spec.catalog) instead of listing
// them. Resolve reads the whole catalogue or fails: never a part of it.
type Catalogue interface {
	Resolve(ctx context.Context, s Scope) ([]CatalogType, error)
}

// CatalogType is one node type of a family's catalogue, complete: capacity, architecture,
// offerings per zone with their prices and availability (a deprecated type, or one the cloud
// cannot deliver in a zone now, has its offerings Unavailable), and the settings its cloud
// needs (e.g. a user data limit). The generic code selects among them and applies the class's
// defaults and overrides.
type CatalogType struct {
	NodeType v1alpha1.NodeType
	// Series is the type's product line (Hetzner Cloud: cx, cpx, ccx, cax), what
	// spec.catalog.select[].series matches.
	Series string
	// CPU is shared or dedicated (v1alpha1.CPUShared, CPUDedicated).
	CPU string
	// Cores and Memory are the type's nominal size, what spec.catalog.select[] bounds
	// (its capacity is what a node of it reports, which may be less).
	Cores  int
	Memory resource.Quantity
	// Deprecated types are listed with every offering unavailable.
	Deprecated bool
}

// Machines (optional) lists the machines the family can prove are this cluster's, by the
// labels the module sets on them (keys.LabelCluster, the claim, the class). A machine it
// cannot attribute is never returned: the orphan collector deletes only what List returns.
type Machines interface {
	List(ctx context.Context, s Scope) ([]Machine, error)
	Delete(ctx context.Context, s Scope, m Machine) error
}

// MachinesAccount (optional, beside Machines) names the account a scope's List reaches
// (a Hetzner Cloud project: its endpoint and token), without any secret in the name: the
// orphan collector lists each account once per pass for all the classes that reach it.
type MachinesAccount interface {
	MachinesAccount(s Scope) string
}

// Machine is one machine of a family's inventory.
type Machine struct {
	// ID is the family's own ID (a server number, a VM's namespace/name); Name is what people
	// call it; ProviderID is the Node's provider ID, when known.
	ID, Name, ProviderID string
	// From the machine's labels: the cluster, the claim (the NodeClaim's name), the class and
	// the NodePool.
	Cluster, Claim, Class, NodePool string
	// Created is the latest moment the machine could have been created: an API that gives
	// the time to the second gives the end of that second (LatestWithin), so that a grace
	// period counted from it is never cut short.
	Created time.Time
}

// LatestWithin is the latest moment within precision of t, a time an API truncated to
// precision (Hetzner's and Kubernetes' creation times to the second): the end of that
// interval.
func LatestWithin(t time.Time, precision time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(precision).Add(precision)
}

// CredentialsChecker (optional) makes a cheap authenticated read with the class's
// credentials. The caller limits how often. A token that is wrong, revoked or lacks a right
// the family needs is a *Error with a precise reason (e.g. v1alpha1.ReasonInvalidCredentials);
// another error means the check could not be made.
type CredentialsChecker interface {
	CheckCredentials(ctx context.Context, s Scope) error
}

// MachineWatcher (optional) says why a created machine has not joined yet (a KubeVirt VM's
// status).
type MachineWatcher interface {
	Observe(ctx context.Context, s Scope, f *v1alpha1.Fulfillment) (Observation, error)
}

// Observation is what a MachineWatcher saw.
type Observation struct {
	// Reason and Message say where the machine is, in its infrastructure's own words.
	Reason, Message string
	// CapacityFailure: the infrastructure cannot run the machine (counts as insufficient
	// capacity for its offering).
	CapacityFailure bool
	// Gone: the machine was deleted behind the fulfiller's back.
	Gone bool
}

// ClassChecker (optional) checks what only the family can check about a class (its
// infrastructure, the rights of its credentials). Each Check is a condition of the class that
// Ready is composed of, after the generic checks.
type ClassChecker interface {
	ClassChecks() []Check
}

// Check is one family check of a class.
type Check struct {
	// Condition is the class condition it sets (a condition type of api/v1alpha1).
	Condition string
	// Run returns nil when the check passes, a *Error with its reason when it fails; another
	// error means the check could not be made (it is retried).
	Run func(ctx context.Context, s Scope) error
}

// APIBudgets (optional) are the API request limits the family's cloud enforces, shared by
// every run with the same credentials: what one run of req takes from which budget (an
// estimate, e.g. a Hetzner Cloud project's 3600 requests per hour, or a Robot endpoint's).
// Runs wait for them (WaitingForAPIBudget). A budget's name says whose it is without any
// secret (a hash of the token, never the token).
type APIBudgets interface {
	APIDemands(req tfrunner.Request) []executor.APIDemand
}

// Billing (optional) says how the family's cloud bills a machine: by each started period of
// BillingPeriod, counted from its creation (Hetzner Cloud: the hour; Hetzner Robot: the
// month). A class of the family may then turn on the billing-aware scale-down
// (spec.scaleDown) without stating its period. TofuNodeClassSpec's validation rules name the
// families that have one, with their periods.
type Billing interface {
	BillingPeriod() time.Duration
}

// ZoneLabels (optional) names the labels besides topology.kubernetes.io/zone that carry a
// node's zone in the family's cloud: the topology keys its CSI driver pins volumes to (Hetzner
// Cloud's csi.hetzner.cloud/location, whose values are the locations the family's offerings
// name as zones). Karpenter reads them as the zone when it plans for a pod's volumes
// (Registry.NormalizeZoneLabels), and a Node of the family is born with them (valued with its
// zone), so that the scheduler can place a pod whose volume pins one on the Node before the
// CSI driver's node plugin registers.
type ZoneLabels interface {
	ZoneLabels() []string
}

// Error is a failure a family can name: Reason is a reason of the API (api/v1alpha1),
// Message says what is wrong without any secret.
type Error struct {
	Reason, Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with reason and a formatted message.
func Errorf(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Registry holds the families a binary knows, by name.
type Registry map[string]Family

// NewRegistry registers families; two with one name are an error.
func NewRegistry(families ...Family) (Registry, error) {
	r := Registry{}
	for _, f := range families {
		if f.Name() == "" {
			return nil, fmt.Errorf("family %T has no name", f)
		}
		if _, dup := r[f.Name()]; dup {
			return nil, fmt.Errorf("family %s registered twice", f.Name())
		}
		r[f.Name()] = f
	}
	return r, nil
}

// Get returns the named family; false for the generic one ("") and for names the binary does
// not know.
func (r Registry) Get(name string) (Family, bool) {
	if name == "" {
		return nil, false
	}
	f, ok := r[name]
	return f, ok
}

// Knows reports whether a class may name the family: the generic one ("") or a registered one.
func (r Registry) Knows(name string) bool {
	_, ok := r.Get(name)
	return name == "" || ok
}

// Names lists the registered families, sorted.
func (r Registry) Names() []string {
	out := make([]string, 0, len(r))
	for name := range r {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// NormalizeZoneLabels registers every family's ZoneLabels with Karpenter as names of
// topology.kubernetes.io/zone (its NormalizedLabels, as karpenter-provider-aws does for its
// CSI driver's topology.ebs.csi.aws.com/zone): a pod requirement or a volume's node affinity
// on one is planned as one on the zone. Karpenter reads that map unguarded, so this runs once,
// before Karpenter's controllers start; a label Karpenter already normalizes to another key is
// an error.
func (r Registry) NormalizeZoneLabels() error {
	for _, name := range r.Names() {
		z, ok := r[name].(ZoneLabels)
		if !ok {
			continue
		}
		for _, label := range z.ZoneLabels() {
			if to, ok := karpv1.NormalizedLabels[label]; ok && to != corev1.LabelTopologyZone {
				return fmt.Errorf("family %s: Karpenter already reads label %s as %s, not as the zone", name, label, to)
			}
			karpv1.NormalizedLabels[label] = corev1.LabelTopologyZone
		}
	}
	return nil
}

// NodeZoneLabels are the family's ZoneLabels valued with zone, for a Node of the named
// family (none for the generic family and families without ZoneLabels).
func (r Registry) NodeZoneLabels(family, zone string) map[string]string {
	f, ok := r.Get(family)
	if !ok || zone == "" {
		return nil
	}
	z, ok := f.(ZoneLabels)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for _, label := range z.ZoneLabels() {
		out[label] = zone
	}
	return out
}

// APIDemands is what a run takes from its family's API budgets (none for the generic family
// and families without APIBudgets), for executor.APIBudgets.
func (r Registry) APIDemands(req tfrunner.Request) []executor.APIDemand {
	f, ok := r.Get(req.Family)
	if !ok {
		return nil
	}
	if b, ok := f.(APIBudgets); ok {
		return b.APIDemands(req)
	}
	return nil
}
