// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"fmt"
	"maps"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
)

// instanceTypes turns a NodeClass's node types into Karpenter instance types. Every type is
// returned, also when none of its offerings can be launched now: drift and consolidation need
// the full list.
func instanceTypes(nc *v1alpha1.TofuNodeClass, unavailable *UnavailableOfferings) ([]*cloudprovider.InstanceType, error) {
	nodeTypes := nc.NodeTypes()
	out := make([]*cloudprovider.InstanceType, 0, len(nodeTypes))
	for i := range nodeTypes {
		it, err := instanceType(&nodeTypes[i], unavailable)
		if err != nil {
			return nil, fmt.Errorf("node type %s: %w", nodeTypes[i].Name, err)
		}
		out = append(out, it)
	}
	return out, nil
}

func instanceType(nt *v1alpha1.NodeType, unavailable *UnavailableOfferings) (*cloudprovider.InstanceType, error) {
	// A type that cannot register within Karpenter's window is listed but never launched.
	fits, _ := classconfig.RegistrationFit(nt)
	zones, capacityTypes := []string{}, []string{}
	offerings := make(cloudprovider.Offerings, 0, len(nt.Offerings))
	for _, o := range nt.Offerings {
		price, err := strconv.ParseFloat(o.Price, 64)
		if err != nil {
			return nil, fmt.Errorf("offering %s: price %q: %w", o.Zone, o.Price, err)
		}
		ct := o.CapacityTypeOrDefault()
		zones, capacityTypes = appendUnique(zones, o.Zone), appendUnique(capacityTypes, ct)
		offerings = append(offerings, &cloudprovider.Offering{
			Requirements: scheduling.NewRequirements(
				scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, o.Zone),
				scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, ct),
			),
			Price:     price,
			Available: fits && !o.Unavailable && !unavailable.IsUnavailable(nt.Name, o.Zone, ct),
		})
	}
	reqs := scheduling.NewRequirements(
		scheduling.NewRequirement(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, nt.Name),
		scheduling.NewRequirement(corev1.LabelArchStable, corev1.NodeSelectorOpIn, nt.ArchitectureOrDefault()),
		scheduling.NewRequirement(corev1.LabelOSStable, corev1.NodeSelectorOpIn, string(corev1.Linux)),
		scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, zones...),
		scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, capacityTypes...),
	)
	for k, v := range nt.Labels {
		reqs.Add(scheduling.NewRequirement(k, corev1.NodeSelectorOpIn, v))
	}
	c := capacity(nt)
	r := classconfig.Reservations(nt)
	return &cloudprovider.InstanceType{
		Name:         nt.Name,
		Requirements: reqs,
		Offerings:    offerings,
		Capacity:     c,
		// What the machine's kubelet is told to keep (the Fulfillment's bootstrap stage), so Allocatable()
		// is what the Node reports.
		Overhead: &cloudprovider.InstanceTypeOverhead{KubeReserved: maps.Clone(r.KubeReserved),
			SystemReserved: maps.Clone(r.SystemReserved), EvictionThreshold: r.EvictionThreshold(c)},
	}, nil
}

// capacity is the node type's capacity with the pod count defaulted as a kubelet would.
func capacity(nt *v1alpha1.NodeType) corev1.ResourceList {
	c := nt.Capacity.DeepCopy()
	if c == nil {
		c = corev1.ResourceList{}
	}
	if _, ok := c[corev1.ResourcePods]; !ok {
		c[corev1.ResourcePods] = resourcePods110.DeepCopy()
	}
	return c
}

func appendUnique(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}

// choice is the offering Create launches.
type choice struct {
	nodeType *v1alpha1.NodeType
	// offering is the class's offering, at the class's price.
	offering *cloudprovider.Offering
	// rank is the price the choice was ranked by: the offering's as the NodePool's
	// NodeOverlays make it.
	rank    float64
	zone    string
	capType string
}

// chooseOffering picks the cheapest launchable offering compatible with the claim's
// requirements among its allowed instance types. overlaid are the types as the claim's
// NodePool's NodeOverlays make them, by name (nil: no overlay applies): prices are ranked as
// they give them, as Karpenter's scheduler ranked them. Ties break by type name, then zone,
// so the choice is stable.
//
// The claim is fit to what the machine has (fitAllocatable): the class's capacity for every
// resource it lists; an overlay adds only resources the class does not list (Karpenter lets
// it add extended resources, never cpu, memory, ephemeral-storage or pods).
func chooseOffering(nc *v1alpha1.TofuNodeClass, its []*cloudprovider.InstanceType, overlaid map[string]*cloudprovider.InstanceType, claim *karpv1.NodeClaim) (*choice, error) {
	reqs := scheduling.NewNodeSelectorRequirementsWithMinValues(claim.Spec.Requirements...)
	var candidates []*choice
	for _, it := range its {
		if err := reqs.Compatible(it.Requirements, scheduling.AllowUndefinedWellKnownLabels); err != nil {
			continue
		}
		nt, ok := nc.NodeType(it.Name)
		if !ok {
			continue
		}
		ov := overlaid[it.Name]
		if !resourcesFit(claim.Spec.Resources.Requests, fitAllocatable(it, ov)) {
			continue
		}
		prices := overlaidPrices(ov)
		for _, o := range it.Offerings.Available().Compatible(reqs) {
			rank, ok := prices[o.Requirements.String()]
			if !ok {
				rank = o.Price
			}
			candidates = append(candidates, &choice{
				nodeType: nt, offering: o, rank: rank,
				zone:    o.Requirements.Get(corev1.LabelTopologyZone).Any(),
				capType: o.Requirements.Get(karpv1.CapacityTypeLabelKey).Any(),
			})
		}
	}
	if len(candidates) == 0 {
		return nil, fmt.Errorf("no launchable offering is compatible with the claim's requirements")
	}
	sort.Slice(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.nodeType.Name != b.nodeType.Name {
			return a.nodeType.Name < b.nodeType.Name
		}
		return a.zone < b.zone
	})
	return candidates[0], nil
}

// overlaidPrices are an overlaid type's offering prices by the offering's requirements (how
// Karpenter's store matches them); nil for no overlaid type.
func overlaidPrices(ov *cloudprovider.InstanceType) map[string]float64 {
	if ov == nil {
		return nil
	}
	out := make(map[string]float64, len(ov.Offerings))
	for _, o := range ov.Offerings {
		out[o.Requirements.String()] = o.Price
	}
	return out
}

// fitAllocatable is what a claim is fit to: the class's allocatable of the type, and, of an
// overlaid type, the resources only the overlay names (an extended resource that the
// machine's device plugin reports and the class does not list). An overlay never raises what
// the class says the machine has.
func fitAllocatable(it, ov *cloudprovider.InstanceType) corev1.ResourceList {
	own := it.Allocatable()
	if ov == nil || !ov.IsCapacityOverlayApplied() {
		return own
	}
	out := maps.Clone(own)
	for name, q := range ov.Allocatable() {
		if _, ok := own[name]; !ok {
			out[name] = q
		}
	}
	return out
}

func resourcesFit(requests, allocatable corev1.ResourceList) bool {
	for name, q := range requests {
		if a, ok := allocatable[name]; !ok || a.Cmp(q) < 0 {
			if q.IsZero() {
				continue
			}
			return false
		}
	}
	return true
}
