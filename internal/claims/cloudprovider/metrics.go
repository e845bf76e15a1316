// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// createDuration is how long CloudProvider.Create took, by how it answered: with a
// provider ID known before the apply (template), with the one the apply reported
// (reported), or with AwaitingProviderID, which Karpenter retries (awaiting). Create never
// waits for an apply, so each call is a few reads.
var createDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Namespace: "fulfiller",
	Subsystem: "cloudprovider",
	Name:      "create_duration_seconds",
	Help:      "Duration of CloudProvider.Create, by provider_id: template (known before the apply), reported (the apply's output), awaiting (not reported yet; Karpenter retries).",
	Buckets:   []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
}, []string{"provider_id"})

// Values of createDuration's provider_id label.
const (
	createTemplate = "template"
	createReported = "reported"
	createAwaiting = "awaiting"
)

func init() {
	crmetrics.Registry.MustRegister(createDuration)
}
