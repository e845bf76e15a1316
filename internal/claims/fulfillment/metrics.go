// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// claimLabelNames are the labels every per-claim metric carries: Karpenter's own names for
// where a claim runs (its NodeClaim metrics use nodepool, instance_type, capacity_type and
// zone), the class and the class's family. No claim's name is a label: the number of series
// is bounded by the classes' catalogues, not by the number of claims.
var claimLabelNames = []string{"nodepool", "instance_type", "capacity_type", "zone", "class", "family"}

// claimLabels are the values of claimLabelNames for a claim of the given family ("" for a
// generic class).
func claimLabels(f *v1alpha1.Fulfillment, family string) prometheus.Labels {
	return prometheus.Labels{
		"nodepool": f.Spec.NodePool, "instance_type": f.Spec.NodeType, "capacity_type": f.Spec.CapacityType,
		"zone": f.Spec.Zone, "class": f.Spec.NodeClass, "family": family,
	}
}

func with(l prometheus.Labels, kv ...string) prometheus.Labels {
	out := make(prometheus.Labels, len(l)+len(kv)/2)
	for k, v := range l {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func labelNames(extra ...string) []string {
	return append(append([]string{}, claimLabelNames...), extra...)
}

// stageBuckets span a node's stages: seconds for a fast simulated machine, tens of minutes
// for a bare-metal install.
var stageBuckets = []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600}

func stageHistogram(name, help string, extra ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "fulfiller", Subsystem: "nodeclaims", Name: name, Help: help, Buckets: stageBuckets,
	}, labelNames(extra...))
}

// Metrics of a claim's stages and runs, served on the controller's metrics endpoint. Each is
// observed once, after the status write that recorded its stage (observeChanges).
var (
	gateTimeouts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fulfiller",
		Subsystem: "readiness_gate",
		Name:      "timeouts_total",
		Help:      "Readiness gates that missed their node type's deadline, by gate and the NodeClass's policy.",
	}, labelNames("gate", "policy"))
	gateDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "fulfiller",
		Subsystem: "readiness_gate",
		Name:      "duration_seconds",
		Help:      "Time from a node's registration until its readiness gate opened, by gate.",
		Buckets:   []float64{1, 5, 10, 20, 30, 60, 120, 300, 600, 1200},
	}, labelNames("gate"))
	applyQueueDuration = stageHistogram("apply_queue_duration_seconds",
		"Time from a NodeClaim's creation until its first apply run started (waiting for a runner, the API budget, a lock).")
	registrationDuration = stageHistogram("registration_duration_seconds",
		"Time from a NodeClaim's creation until its Node registered.")
	initializationDuration = stageHistogram("initialization_duration_seconds",
		"Time from a Node's registration until the claim was initialized (all readiness gates open).")
	destroyDuration = stageHistogram("destroy_duration_seconds",
		"Time from the start of a claim's destroy until its machine and state were gone.")
	runDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "fulfiller", Subsystem: "runs", Name: "duration_seconds",
		Help:    "Duration of each tofu run that ended, by operation (apply, destroy) and result (Succeeded, Failed).",
		Buckets: stageBuckets,
	}, labelNames("operation", "result"))
	runsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fulfiller", Subsystem: "runs", Name: "total",
		Help: "Tofu runs that ended, by operation, result and error class (empty on success).",
	}, labelNames("operation", "result", "error_class"))
	runRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fulfiller", Subsystem: "runs", Name: "retries_total",
		Help: "Runs started again after a failed attempt of the same operation, by operation.",
	}, labelNames("operation"))
	bootstrapTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fulfiller", Subsystem: "bootstrap", Name: "tokens_total",
		Help: "Claims' bootstrap tokens by event: minted, extended (an unjoined claim's expiry pushed out), revoked (once its Node registered).",
	}, labelNames("event"))
	bootReports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fulfiller", Subsystem: "bootstrap", Name: "reports_total",
		Help: "Boot stages machines reported (Installing, Joining, Failed), each counted when the claim's Joined condition first showed it.",
	}, labelNames("stage"))
	lockWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fulfiller", Subsystem: "state_lock", Name: "waits_total",
		Help: "Times a claim's run found its state lock held and waited for it (status.lockHolder set).",
	}, labelNames())
)

// Token events (bootstrapTokens' event label).
const (
	tokenMinted   = "minted"
	tokenExtended = "extended"
	tokenRevoked  = "revoked"
)

// bootStageOf is the boot stage a machine reported that the Joined condition's reason shows.
var bootStageOf = map[string]string{
	v1alpha1.ReasonInstalling:      v1alpha1.BootStageInstalling,
	v1alpha1.ReasonJoining:         v1alpha1.BootStageJoining,
	v1alpha1.ReasonBootstrapFailed: v1alpha1.BootStageFailed,
}

func init() {
	crmetrics.Registry.MustRegister(gateTimeouts, gateDuration, applyQueueDuration, registrationDuration,
		initializationDuration, destroyDuration, runDuration, runsTotal, runRetries, bootstrapTokens, bootReports, lockWaits)
}

// observation is one metric sample a status change makes.
type observation struct {
	// histogram or counter (one of the two)
	histogram *prometheus.HistogramVec
	counter   *prometheus.CounterVec
	labels    prometheus.Labels
	value     float64
}

func (o observation) record() {
	if o.histogram != nil {
		o.histogram.With(o.labels).Observe(o.value)
		return
	}
	o.counter.With(o.labels).Add(o.value)
}

// observeChanges is what changed between a claim's written status and the one before it, as
// metric samples: each stage reached for the first time, each run that ended or started
// again. It is pure; the caller records the samples once the write went through, so a
// conflicting write (retried) counts nothing twice.
func observeChanges(before, after *v1alpha1.Fulfillment, family string) []observation {
	l := claimLabels(after, family)
	b, a := before.Status.Stages, after.Status.Stages
	var out []observation
	span := func(h *prometheus.HistogramVec, was, from, to *metav1.Time) {
		if was == nil && to != nil && from != nil {
			out = append(out, observation{histogram: h, labels: l, value: seconds(to.Sub(from.Time))})
		}
	}
	span(applyQueueDuration, b.ApplyStarted, a.ClaimCreated, a.ApplyStarted)
	span(registrationDuration, b.Registered, a.ClaimCreated, a.Registered)
	span(initializationDuration, b.Initialized, a.Registered, a.Initialized)
	span(destroyDuration, b.Destroyed, a.DestroyStarted, a.Destroyed)

	if id := after.Status.TokenID; id != "" && id != before.Status.TokenID {
		out = append(out, observation{counter: bootstrapTokens, labels: with(l, "event", tokenMinted), value: 1})
	}
	wasJoined, joined := before.StatusConditions().Get(v1alpha1.ConditionJoined), after.StatusConditions().Get(v1alpha1.ConditionJoined)
	if joined != nil && joined.IsTrue() && (wasJoined == nil || !wasJoined.IsTrue()) && after.Status.TokenID != "" {
		// The join stage revokes the token in the reconcile that sees the Node.
		out = append(out, observation{counter: bootstrapTokens, labels: with(l, "event", tokenRevoked), value: 1})
	}
	if joined != nil && (wasJoined == nil || wasJoined.Reason != joined.Reason) {
		if stage, ok := bootStageOf[joined.Reason]; ok {
			out = append(out, observation{counter: bootReports, labels: with(l, "stage", stage), value: 1})
		}
	}
	if before.Status.LockHolder == nil && after.Status.LockHolder != nil {
		out = append(out, observation{counter: lockWaits, labels: l, value: 1})
	}

	old := map[string]v1alpha1.Run{}
	for _, r := range before.Status.Runs {
		old[r.Name] = r
	}
	for _, r := range after.Status.Runs {
		prev, seen := old[r.Name]
		if !seen && r.Attempt > 1 {
			out = append(out, observation{counter: runRetries, labels: with(l, "operation", r.Operation), value: 1})
		}
		if r.Phase == v1alpha1.RunRunning || (seen && prev.Phase == r.Phase) {
			continue
		}
		out = append(out, observation{counter: runsTotal, value: 1,
			labels: with(l, "operation", r.Operation, "result", string(r.Phase), "error_class", r.ErrorClass)})
		if r.StartTime != nil && r.CompletionTime != nil {
			out = append(out, observation{histogram: runDuration, value: seconds(r.CompletionTime.Sub(r.StartTime.Time)),
				labels: with(l, "operation", r.Operation, "result", string(r.Phase))})
		}
	}
	return out
}

func seconds(d time.Duration) float64 {
	if d < 0 {
		return 0
	}
	return d.Seconds()
}
