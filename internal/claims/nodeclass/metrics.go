// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// catalogReadsTotal counts the reads of the classes' live catalogues (a family's cloud API),
// by result: each is a request against the cloud, at most one per class per refresh interval
// (one a minute after a failure).
var catalogReadsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "fulfiller", Subsystem: "catalog", Name: "reads_total",
	Help: "Reads of a class's live catalogue from its family's cloud, by result (Succeeded, Failed).",
}, []string{"class", "family", "result"})

// catalogAgeDesc is read from the classes in the cache when Prometheus scrapes: how old the
// node types Karpenter plans with are.
var catalogAgeDesc = prometheus.NewDesc("fulfiller_catalog_age_seconds",
	"Seconds since a catalogue class's node types were last read from its family's cloud (status.catalog.refreshed).",
	[]string{"class", "family"}, nil)

// classGauges is the collector of catalogAgeDesc. The process's NodeClass controller gives it
// its cache (NewController); until then it collects nothing.
type classGauges struct {
	source atomic.Pointer[classSource]
}

type classSource struct {
	kube  client.Reader
	clock clock.PassiveClock
}

var gauges = &classGauges{}

func init() { crmetrics.Registry.MustRegister(catalogReadsTotal, gauges) }

func (g *classGauges) Describe(ch chan<- *prometheus.Desc) { ch <- catalogAgeDesc }

func (g *classGauges) Collect(ch chan<- prometheus.Metric) {
	src := g.source.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var classes v1alpha1.TofuNodeClassList
	if err := src.kube.List(ctx, &classes); err != nil {
		ch <- prometheus.NewInvalidMetric(catalogAgeDesc, err)
		return
	}
	for _, s := range catalogAges(classes.Items, src.clock.Now()) {
		ch <- prometheus.MustNewConstMetric(catalogAgeDesc, prometheus.GaugeValue, s.seconds, s.class, s.family)
	}
}

type catalogAge struct {
	class, family string
	seconds       float64
}

// catalogAges are the ages of the classes' catalogues that were read (pure, for the tests).
func catalogAges(classes []v1alpha1.TofuNodeClass, now time.Time) []catalogAge {
	var out []catalogAge
	for _, nc := range classes {
		if c := nc.Status.Catalog; nc.Spec.Catalog != nil && c != nil && c.Refreshed != nil {
			out = append(out, catalogAge{class: nc.Name, family: nc.Spec.Family, seconds: max(now.Sub(c.Refreshed.Time).Seconds(), 0)})
		}
	}
	return out
}

// catalogResult is the result label of a catalogue read.
func catalogResult(err error) string {
	if err != nil {
		return "Failed"
	}
	return "Succeeded"
}
