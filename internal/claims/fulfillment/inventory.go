// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// The inventory's gauges are read from the Fulfillments in the cache when Prometheus scrapes,
// summed over the claims that share their labels: nothing to keep up to date, nothing left
// behind by a claim that is gone.
var (
	claimsDesc = prometheus.NewDesc("fulfiller_nodeclaims",
		"Fulfillments by phase (Pending, Applying, Joining, Ready, Failed, Deleting, ...).",
		labelNames("phase"), nil)
	hourlyCostDesc = prometheus.NewDesc("fulfiller_nodeclaim_hourly_cost",
		"Sum of the hourly prices of the claims' chosen offerings (the price Create recorded; a Robot server's monthly price amortised per hour). Summed by nodepool it is Karpenter's karpenter_nodepools_cost_total.",
		claimLabelNames, nil)
	accruedCostDesc = prometheus.NewDesc("fulfiller_nodeclaim_cost_accrued",
		"Sum over the claims that exist of their hourly price times the hours since their apply succeeded.",
		claimLabelNames, nil)
	runsInFlightDesc = prometheus.NewDesc("fulfiller_runs_in_flight",
		"Tofu runs running now, by operation.",
		labelNames("operation"), nil)
	heldDesc = prometheus.NewDesc("fulfiller_nodeclaims_scale_down_held",
		"Claims whose empty node the billing-aware scale-down keeps from consolidation until its paid period ends (ScaleDownHeld=True).",
		claimLabelNames, nil)
	waitingDesc = prometheus.NewDesc("fulfiller_nodeclaims_waiting",
		"Claims whose apply has not started, by what they wait for (the Pending phase's reason: WaitingForRunner, WaitingForAPIBudget, StateLocked, ...).",
		labelNames("reason"), nil)
)

// inventory is the collector of the gauges above. The process's one Fulfillment controller
// gives it its cache (NewController); until then it collects nothing.
type inventory struct {
	source atomic.Pointer[inventorySource]
}

type inventorySource struct {
	kube  client.Reader
	clock clock.Clock
}

var claimInventory = &inventory{}

func init() { crmetrics.Registry.MustRegister(claimInventory) }

func (i *inventory) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{claimsDesc, hourlyCostDesc, accruedCostDesc, runsInFlightDesc, waitingDesc, heldDesc} {
		ch <- d
	}
}

func (i *inventory) Collect(ch chan<- prometheus.Metric) {
	src := i.source.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var fs v1alpha1.FulfillmentList
	var classes v1alpha1.TofuNodeClassList
	if err := src.kube.List(ctx, &fs); err != nil {
		ch <- prometheus.NewInvalidMetric(claimsDesc, err)
		return
	}
	if err := src.kube.List(ctx, &classes); err != nil {
		ch <- prometheus.NewInvalidMetric(claimsDesc, err)
		return
	}
	families := map[string]string{}
	for _, nc := range classes.Items {
		families[nc.Name] = nc.Spec.Family
	}
	for _, s := range inventorySamples(fs.Items, families, src.clock.Now()) {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, s.value, s.values...)
	}
}

type inventorySample struct {
	desc   *prometheus.Desc
	values []string
	value  float64
}

// inventorySamples sums the claims into the inventory's gauges (pure, for the tests).
func inventorySamples(fs []v1alpha1.Fulfillment, families map[string]string, now time.Time) []inventorySample {
	type key struct {
		desc   *prometheus.Desc
		labels [7]string
	}
	sums := map[key]float64{}
	var order []key
	add := func(d *prometheus.Desc, f *v1alpha1.Fulfillment, extra string, v float64) {
		k := key{desc: d, labels: [7]string{f.Spec.NodePool, f.Spec.NodeType, f.Spec.CapacityType, f.Spec.Zone, f.Spec.NodeClass, families[f.Spec.NodeClass], extra}}
		if _, ok := sums[k]; !ok {
			order = append(order, k)
		}
		sums[k] += v
	}
	for i := range fs {
		f := &fs[i]
		add(claimsDesc, f, f.Status.Phase, 1)
		if f.Status.Phase == v1alpha1.PhasePending {
			add(waitingDesc, f, f.Status.Reason, 1)
		}
		price, err := strconv.ParseFloat(f.Spec.Price, 64)
		if err != nil {
			price = 0
		}
		add(hourlyCostDesc, f, "", price)
		if a := f.Status.Stages.Applied; a != nil && now.After(a.Time) {
			add(accruedCostDesc, f, "", price*now.Sub(a.Time).Hours())
		} else {
			add(accruedCostDesc, f, "", 0)
		}
		if c := f.StatusConditions().Get(v1alpha1.ConditionScaleDownHeld); c != nil {
			// Series of the classes with the policy only; 0 while none of their claims is held.
			held := 0.0
			if c.IsTrue() {
				held = 1
			}
			add(heldDesc, f, "", held)
		}
		for _, r := range f.Status.Runs {
			if r.Phase == v1alpha1.RunRunning {
				add(runsInFlightDesc, f, r.Operation, 1)
			}
		}
	}
	out := make([]inventorySample, 0, len(order))
	for _, k := range order {
		n := len(claimLabelNames)
		if k.desc == claimsDesc || k.desc == runsInFlightDesc || k.desc == waitingDesc {
			n++
		}
		out = append(out, inventorySample{desc: k.desc, values: append([]string{}, k.labels[:n]...), value: sums[k]})
	}
	return out
}
