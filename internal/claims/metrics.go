package claims

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
	// createDuration is how long CloudProvider.Create took, by how it learnt the provider
	// ID: known before the apply (template), awaited from the apply's output, or not yet
	// reported when the bounded wait ended. Its buckets reach past the bound (providerIDWait).
	createDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "fulfiller",
		Subsystem: "cloudprovider",
		Name:      "create_duration_seconds",
		Help:      "Duration of CloudProvider.Create, by provider_id: template (known before the apply), awaited (the apply's output), timeout (the bounded wait ended first).",
		Buckets:   []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 21, 25, 30, 60},
	}, []string{"provider_id"})
)

// Values of createDuration's provider_id label.
const (
	createTemplate = "template"
	createAwaited  = "awaited"
	createTimeout  = "timeout"
)

func init() {
	crmetrics.Registry.MustRegister(gateTimeouts, gateDuration, createDuration)
}
