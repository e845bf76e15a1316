// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package run drives the tofu runs of the claims for the Fulfillment controller: one Driver
// per operation (apply, destroy) that starts, watches, restarts and retries runs, their
// history in the Fulfillment's status, the runner request built from what the claim
// recorded, the state lock a run must hold, and the claims waiting for a runner.
package run

import (
	"time"

	"github.com/awslabs/operatorpkg/status"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// DefaultRetryBackoff is the first wait before a failed run is tried again when Options set
// none (FULFILLER_RETRY_BACKOFF).
const DefaultRetryBackoff = 5 * time.Second

// DefaultDestroyDeadline bounds a destroy when Options set none (FULFILLER_DESTROY_DEADLINE).
const DefaultDestroyDeadline = 30 * time.Minute

// Claim is what the runs of one claim read and change in one reconcile of its Fulfillment:
// the Fulfillment (its status is written once, after the stages), its class and node type as
// they are now, its conditions, and what is to happen once the status is written.
type Claim struct {
	F *v1alpha1.Fulfillment
	// Class and NodeType are nil when they are gone.
	Class    *v1alpha1.TofuNodeClass
	NodeType *v1alpha1.NodeType
	Conds    status.ConditionSet
	// Events to publish after the status is written.
	Events []events.Event
	// Done are events of what was done outside the status and cannot be undone (a released
	// state lock): published whatever becomes of the status write, since after a conflict
	// the next reconcile starts from what was done and never sees it happen again.
	Done []events.Event
	// Replace asks Karpenter to replace the claim; done only after the status that says why
	// is written.
	Replace bool
	// UserData is the user data the bootstrap stage made in this reconcile (the runs need not
	// read it back); "" otherwise.
	UserData string
}

// Unavailable marks an offering unavailable for a while: the same inputs would fail again,
// so Karpenter plans onto another one.
type Unavailable interface {
	MarkUnavailable(nodeType, zone, capacityType string)
}

// Options are what the runs are built from.
type Options struct {
	Kube client.Client
	// APIReader reads from the API server, uncached: Secrets are not in the cache.
	APIReader   client.Reader
	Clock       clock.Clock
	Executor    executor.Executor
	Unavailable Unavailable
	// Namespace holds the claims' user data and the Secrets classes name.
	Namespace string
	// StateNamespace holds the claims' states and locks (kubernetes backend) unless a class
	// names its own.
	StateNamespace string
	// TofuPath is the tofu binary runners use.
	TofuPath string
	// RunnerShortcuts turns on the runner's fast paths (tfrunner.Request.Shortcuts).
	RunnerShortcuts bool
	// RunEnv is extra environment for every run (e.g. KUBECONFIG for the kubernetes backend
	// when runs are local processes).
	RunEnv map[string]string
	// RetryBackoff is the first wait before a retried run; it doubles per attempt, up to 60
	// times it (default DefaultRetryBackoff: at most 5 minutes).
	RetryBackoff time.Duration
	// DestroyDeadline bounds a destroy run (default DefaultDestroyDeadline), as a node type's
	// deadlines.apply bounds its applies: the runner interrupts tofu at it.
	DestroyDeadline time.Duration
	// ClusterName is this cluster's name: the value of the cluster label the modules put on
	// every machine (keys.LabelCluster).
	ClusterName string
}

// Runs starts, watches and records the claims' runs (one Driver per operation shares it).
type Runs struct {
	kube        client.Client
	apiReader   client.Reader
	clock       clock.Clock
	executor    executor.Executor
	unavailable Unavailable
	opts        Options
	waiters     *waiters
}

// New builds the runs, with the options' defaults.
func New(o Options) *Runs {
	if o.RetryBackoff == 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.DestroyDeadline == 0 {
		o.DestroyDeadline = DefaultDestroyDeadline
	}
	return &Runs{kube: o.Kube, apiReader: o.APIReader, clock: o.Clock, executor: o.Executor, unavailable: o.Unavailable, opts: o,
		waiters: newWaiters()}
}

// Wake is where the claims woken when a run ends arrive: its own, and the one waiting
// longest for a runner.
func (r *Runs) Wake() <-chan event.GenericEvent { return r.waiters.wake }

// RunEnded wakes the claim of a run that an executor saw end (executor.Local.OnEnd), so that
// its end is recorded at once rather than at the next poll.
func (r *Runs) RunEnded(_ string, labels map[string]string) {
	if name := labels[keys.LabelNodeClaim]; name != "" {
		r.waiters.enqueue(name)
	}
}
