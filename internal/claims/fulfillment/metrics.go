// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the readiness gates, served on the controller's metrics endpoint.
var (
	gateTimeouts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fulfiller",
		Subsystem: "readiness_gate",
		Name:      "timeouts_total",
		Help:      "Readiness gates that missed their node type's deadline, by gate, node type and the NodeClass's policy.",
	}, []string{"gate", "node_type", "policy"})
	gateDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "fulfiller",
		Subsystem: "readiness_gate",
		Name:      "duration_seconds",
		Help:      "Time from a node's registration until its readiness gate opened, by gate and node type.",
		Buckets:   []float64{1, 5, 10, 20, 30, 60, 120, 300, 600, 1200},
	}, []string{"gate", "node_type"})
)

func init() {
	crmetrics.Registry.MustRegister(gateTimeouts, gateDuration)
}
