// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var poolMachinesDesc = prometheus.NewDesc("fulfiller_pool_machines",
	"Machines of a class's finite pool (Hetzner Robot servers) by state: free (to be installed), standby (installed ahead of need), leased (to a claim), quarantined (out of service until cleared); as the keeper found them in its last round.",
	[]string{"class", "family", "state"}, nil)

// classMachines is one class's pool as the keeper counted it.
type classMachines struct {
	family string
	states map[string]int
}

// machineGauges holds what the keeper's last round counted, per class, for the scrape: a
// class that is gone, or has no pool any more, leaves no series.
type machineGauges struct {
	mu      sync.Mutex
	byClass map[string]classMachines
}

var poolMachines = &machineGauges{}

func init() { crmetrics.Registry.MustRegister(poolMachines) }

func (g *machineGauges) set(byClass map[string]classMachines) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.byClass = byClass
}

func (g *machineGauges) last(class string) map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byClass[class].states
}

func (g *machineGauges) Describe(ch chan<- *prometheus.Desc) { ch <- poolMachinesDesc }

func (g *machineGauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for class, m := range g.byClass {
		for state, n := range m.states {
			ch <- prometheus.MustNewConstMetric(poolMachinesDesc, prometheus.GaugeValue, float64(n), class, m.family, state)
		}
	}
}
