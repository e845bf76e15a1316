// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/operator/options"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// overlaidTypes are its as Karpenter's InstanceTypeStore makes them for a NodePool: a copy of
// each type an overlay changes, with every offering at prices[type] and capacity[type] added.
func overlaidTypes(its []*cloudprovider.InstanceType, prices map[string]float64, capacity map[string]corev1.ResourceList) map[string]*cloudprovider.InstanceType {
	if prices == nil && capacity == nil {
		return nil
	}
	out := map[string]*cloudprovider.InstanceType{}
	for _, it := range its {
		ov := &cloudprovider.InstanceType{Name: it.Name, Requirements: it.Requirements, Overhead: it.Overhead, Capacity: it.Capacity, Offerings: it.Offerings}
		if p, ok := prices[it.Name]; ok {
			ov.Offerings = make(cloudprovider.Offerings, len(it.Offerings))
			for i, o := range it.Offerings {
				c := *o
				c.Price = p
				ov.Offerings[i] = &c
			}
		}
		if c, ok := capacity[it.Name]; ok {
			ov.ApplyCapacityOverlay(c)
		}
		out[it.Name] = ov
	}
	return out
}

// TestChooseOfferingOverlaid: offerings are ranked by the overlaid prices and recorded at the
// class's; a claim is fit to the class's capacity, an overlay adding only what the class
// does not list.
func TestChooseOfferingOverlaid(t *testing.T) {
	gpu := corev1.ResourceName("example.com/gpu")
	for _, tc := range []struct {
		name      string
		prices    map[string]float64
		capacity  map[string]corev1.ResourceList
		requests  corev1.ResourceList
		largeGPUs string // the class's own example.com/gpu of type large
		wantType  string
		wantZone  string
		wantPrice float64
		wantErr   bool
	}{
		{name: "no overlay: the class's cheapest", wantType: "small", wantZone: "b", wantPrice: 0.009},
		{name: "an overlay makes the dearer type the cheaper", prices: map[string]float64{"large": 0.001},
			wantType: "large", wantZone: "a", wantPrice: 0.04},
		{name: "an overlay that leaves it dearer changes nothing", prices: map[string]float64{"large": 0.02},
			wantType: "small", wantZone: "b", wantPrice: 0.009},
		{name: "an overlay raising the cheaper type's price", prices: map[string]float64{"small": 1},
			wantType: "large", wantZone: "a", wantPrice: 0.04},
		{name: "overlaid equal prices tie by type name, then zone", prices: map[string]float64{"small": 0.5, "large": 0.5},
			wantType: "large", wantZone: "a", wantPrice: 0.04},
		{name: "a resource no type has fits none", requests: corev1.ResourceList{gpu: resource.MustParse("1")}, wantErr: true},
		{name: "a resource only an overlay adds fits the type it adds it to",
			capacity: map[string]corev1.ResourceList{"large": {gpu: resource.MustParse("1")}},
			requests: corev1.ResourceList{gpu: resource.MustParse("1")}, wantType: "large", wantZone: "a", wantPrice: 0.04},
		{name: "an overlay does not raise what the class lists", largeGPUs: "1",
			capacity: map[string]corev1.ResourceList{"large": {gpu: resource.MustParse("4")}},
			requests: corev1.ResourceList{gpu: resource.MustParse("2")}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := test.TwoTypeClass()
			if tc.largeGPUs != "" {
				nc.Spec.NodeTypes[1].Capacity[gpu] = resource.MustParse(tc.largeGPUs)
			}
			its, err := instanceTypes(nc, NewUnavailableOfferings(clocktesting.NewFakeClock(time.Now()), time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			claim := claimFor([]string{"small", "large"}, "1")
			for name, q := range tc.requests {
				claim.Spec.Resources.Requests[name] = q
			}
			ch, err := chooseOffering(nc, its, overlaidTypes(its, tc.prices, tc.capacity), claim)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("chose %s/%s, want an error", ch.nodeType.Name, ch.zone)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ch.nodeType.Name != tc.wantType || ch.zone != tc.wantZone || ch.offering.Price != tc.wantPrice {
				t.Errorf("chose %s/%s at %g, want %s/%s at the class's %g", ch.nodeType.Name, ch.zone, ch.offering.Price, tc.wantType, tc.wantZone, tc.wantPrice)
			}
		})
	}
}

// fakeOverlays is an InstanceTypeStore that overlays each type's prices, or fails.
type fakeOverlays struct {
	prices map[string]float64
	err    error
	pools  []string
}

func (f *fakeOverlays) ApplyAll(pool string, its []*cloudprovider.InstanceType) ([]*cloudprovider.InstanceType, error) {
	f.pools = append(f.pools, pool)
	if f.err != nil {
		return nil, f.err
	}
	byName := overlaidTypes(its, f.prices, nil)
	out := make([]*cloudprovider.InstanceType, 0, len(its))
	for _, it := range its {
		out = append(out, byName[it.Name])
	}
	return out, nil
}

// TestCreateOverlaid: with the NodeOverlay gate on, Create launches what the claim's
// NodePool's overlays make the cheapest and records the class's price; with it off, or
// before Karpenter evaluated the pool's overlays, it does not use them.
func TestCreateOverlaid(t *testing.T) {
	gated := func(on bool) context.Context {
		o := &options.Options{}
		o.FeatureGates.NodeOverlay = on
		return options.ToContext(context.Background(), o)
	}
	for _, tc := range []struct {
		name      string
		gate      bool
		err       error
		wantType  string
		wantPrice string
		wantErr   string
	}{
		{name: "gate on: the overlaid cheapest", gate: true, wantType: "large", wantPrice: "0.04"},
		{name: "gate off: the class's cheapest", gate: false, wantType: "small", wantPrice: "0.009"},
		{name: "pool not evaluated yet: retried", gate: true, err: cloudprovider.NewUnevaluatedNodePoolError("default"), wantErr: v1alpha1.ReasonOverlaysNotEvaluated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			nc := test.TwoTypeClass()
			nc.Name = "sim"
			test.Ready(nc)
			test.ExpectApplied(t, e.kube, nc)
			store := &fakeOverlays{prices: map[string]float64{"large": 0.001}, err: tc.err}
			e.provider.overlays = store
			e.ctx = gated(tc.gate)
			claim := test.NodeClaim("c1", "sim", e.clock.Now())
			claim.Spec.Requirements = claimFor([]string{"small", "large"}, "1").Spec.Requirements
			test.ExpectApplied(t, e.kube, claim)
			_, err := e.provider.Create(e.ctx, claim)
			if tc.wantErr != "" {
				expectCreateError(t, err, tc.wantErr)
				return
			}
			// The class predicts no provider ID: the decision is recorded, the claim waits.
			expectCreateError(t, err, v1alpha1.ReasonAwaitingProviderID)
			if f := e.fulfillment(claim.Name); f.Spec.NodeType != tc.wantType || f.Spec.Price != tc.wantPrice {
				t.Errorf("recorded %s at %s, want %s at the class's %s", f.Spec.NodeType, f.Spec.Price, tc.wantType, tc.wantPrice)
			}
			if tc.gate && (len(store.pools) != 1 || store.pools[0] != "default") {
				t.Errorf("overlays asked for pools %v, want the claim's default", store.pools)
			}
			if !tc.gate && len(store.pools) != 0 {
				t.Errorf("overlays asked for pools %v with the gate off", store.pools)
			}
		})
	}
}
