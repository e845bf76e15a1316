// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/billing"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Family returns the family a class names; false for a generic class or a family this
// binary does not know (SpecValid says so).
func Family(families family.Registry, nc *v1alpha1.TofuNodeClass) (family.Family, bool) {
	if nc == nil {
		return nil, false
	}
	return families.Get(nc.Spec.Family)
}

// Pools: families whose machines are a finite pool leased to one claim at a time
// (family.Pool). Create leases a machine and records what the module needs on the
// Fulfillment; the destroy gives it back; the node types' offerings are available only while
// the pool has a machine for them; the pool keeper looks after each class's pool.

// Pools is what the generic code needs to call a class's Pool.
type Pools struct {
	Families family.Registry
	// Reader reads from the API server (the leases' compare-and-swap), Writer writes.
	Reader client.Reader
	Writer client.Client
	// StateNamespace is where pools keep their leases: the controller's state namespace.
	StateNamespace string
	// Cache, when set, reads Nodes and NodeClaims from the informers' cache by provider ID
	// (the spec.providerID and status.providerID indexes Karpenter's operator registers):
	// the Scope's Occupied. The CloudProvider sets it; the pool keeper and the destroy do not
	// lease.
	Cache client.Reader
}

// Field indexes Karpenter's operator registers, which the controllers list by: Nodes by
// spec.providerID, NodeClaims by status.providerID.
const (
	NodeProviderIDField      = "spec.providerID"
	NodeClaimProviderIDField = "status.providerID"
)

// occupied says whether a Node or a NodeClaim carries the provider ID.
func occupied(c client.Reader) func(ctx context.Context, providerID string) (bool, error) {
	return func(ctx context.Context, providerID string) (bool, error) {
		nodes := &corev1.NodeList{}
		if err := c.List(ctx, nodes, client.MatchingFields{NodeProviderIDField: providerID}); err != nil {
			return false, fmt.Errorf("listing the nodes of %s: %w", providerID, err)
		}
		if len(nodes.Items) > 0 {
			return true, nil
		}
		claims := &karpv1.NodeClaimList{}
		if err := c.List(ctx, claims, client.MatchingFields{NodeClaimProviderIDField: providerID}); err != nil {
			return false, fmt.Errorf("listing the nodeclaims of %s: %w", providerID, err)
		}
		return len(claims.Items) > 0, nil
	}
}

// Of returns the class's Pool and its scope (without credentials); false when the class's
// family has none.
func (p *Pools) Of(nc *v1alpha1.TofuNodeClass) (family.Pool, family.Scope, bool) {
	if p == nil {
		return nil, family.Scope{}, false
	}
	f, ok := Family(p.Families, nc)
	if !ok {
		return nil, family.Scope{}, false
	}
	pool, ok := f.(family.Pool)
	s := family.Scope{Class: nc, Reader: p.Reader, Writer: p.Writer, StateNamespace: p.StateNamespace}
	if p.Cache != nil {
		s.Occupied = occupied(p.Cache)
	}
	return pool, s, ok
}

// ErrorRules are a class's error rules as the runner takes them (tfrunner.ErrorRule).
func ErrorRules(rules []v1alpha1.ErrorRule) []tfrunner.ErrorRule {
	if len(rules) == 0 {
		return nil
	}
	out := make([]tfrunner.ErrorRule, len(rules))
	for i, r := range rules {
		out[i] = tfrunner.ErrorRule{Code: r.Code, Pattern: r.Pattern, Class: tfrunner.ErrorClass(r.Class)}
	}
	return out
}

// ScaleDownPolicy is the billing-aware scale-down of a class (spec.scaleDown with policy
// AtPaidPeriodEnd): its billing period, stated or its family's (family.Billing), and its
// margin. False when the class has none, or states no period and its family bills by none
// (the API server refuses such a class).
func ScaleDownPolicy(families family.Registry, nc *v1alpha1.TofuNodeClass) (billing.Policy, bool) {
	if nc == nil || nc.Spec.ScaleDown == nil || nc.Spec.ScaleDown.Policy != v1alpha1.ScaleDownAtPaidPeriodEnd {
		return billing.Policy{}, false
	}
	sd := nc.Spec.ScaleDown
	p := billing.Policy{Margin: sd.MarginOrDefault()}
	if sd.BillingPeriod != nil && sd.BillingPeriod.Duration > 0 {
		p.Period = sd.BillingPeriod.Duration
	} else if f, ok := Family(families, nc); ok {
		if b, ok := f.(family.Billing); ok {
			p.Period = b.BillingPeriod()
		}
	}
	return p, p.Period > 0
}
