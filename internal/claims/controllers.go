// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/controller"
	"github.com/awslabs/operatorpkg/status"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment"
	"github.com/fulfiller-sh/fulfiller/internal/claims/garbagecollection"
	"github.com/fulfiller-sh/fulfiller/internal/claims/nodeclass"
	"github.com/fulfiller-sh/fulfiller/internal/claims/pool"
	"github.com/fulfiller-sh/fulfiller/internal/claims/scaledown"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// Options are what the CloudProvider and the controllers are built from.
type Options struct {
	// Kube reads through the manager's cache and writes; APIReader reads from the API server.
	Kube      client.Client
	APIReader client.Reader
	Clock     clock.Clock
	Recorder  events.Recorder
	// ConditionRecorder records the events of the status-condition controllers (operatorpkg's,
	// as Karpenter core's NodeClaim and NodePool have); nil: none run.
	ConditionRecorder record.EventRecorder
	// RESTConfig is the API server the join preflight probes for bootstrap token
	// authentication (nil: no probe).
	RESTConfig *rest.Config
	Executor   executor.Executor
	// Unavailable are the offerings that recently failed, shared by the CloudProvider and
	// the Fulfillment controller.
	Unavailable *cloudprovider.UnavailableOfferings
	// Families are the node-type families classes may name.
	Families family.Registry
	// ClusterName is this cluster's name (keys.LabelCluster).
	ClusterName string
	// Namespace holds the claims' user data and runs, and the Secrets classes name;
	// StateNamespace the claims' states and locks (kubernetes backend) for classes that name
	// none, and the pools' leases (empty: Namespace).
	Namespace, StateNamespace string
	// TofuPath, RunnerShortcuts, RunEnv, DestroyDeadline and RetryBackoff are the runs'
	// (fulfillment.Options).
	TofuPath        string
	RunnerShortcuts bool
	RunEnv          map[string]string
	DestroyDeadline time.Duration
	RetryBackoff    time.Duration
	// OrphanGrace is how old a machine or state without a claim must be before it is
	// collected (default garbagecollection.DefaultOrphanGrace).
	OrphanGrace time.Duration
	// PoolKeeperInterval is how often the pools are kept.
	PoolKeeperInterval time.Duration
	// ModuleDir keeps what the classes' remote module sources fetched (with TofuPath, which
	// the controller's image has as its runners' do); ModuleRefresh is how often a source is
	// resolved again (nodeclass.Options).
	ModuleDir     string
	ModuleRefresh time.Duration
	// APIBudgets, when set, are the budgets the executor admits runs by; the orphan
	// collector's requests are taken from them too.
	APIBudgets *executor.APIBudgets
	// RepairToleration is how long a Node may be NotReady or Unknown before the repair
	// policies replace it (cloudprovider.Options.RepairToleration).
	RepairToleration time.Duration
	// Overlays are Karpenter's NodeOverlays (the operator's InstanceTypeStore), which Create
	// ranks a claim's offerings by (cloudprovider.Options.Overlays).
	Overlays cloudprovider.Overlays
}

// withDefaults is o with the state namespace resolved: the one place it is defaulted.
func (o Options) withDefaults() Options {
	o.StateNamespace = cmp.Or(o.StateNamespace, o.Namespace)
	return o
}

// NewCloudProvider is Karpenter's CloudProvider of the claims.
func NewCloudProvider(o Options) *cloudprovider.CloudProvider {
	o = o.withDefaults()
	return cloudprovider.New(cloudprovider.Options{Kube: o.Kube, APIReader: o.APIReader, Clock: o.Clock, Unavailable: o.Unavailable,
		StateNamespace: o.StateNamespace, Families: o.Families, RepairToleration: o.RepairToleration, Overlays: o.Overlays})
}

// NewControllers are the fulfiller's controllers, in one list, to run beside Karpenter's. The
// executor learns to wake a claim as soon as its run ends.
func NewControllers(o Options) []controller.Controller {
	o = o.withDefaults()
	fulfillments := fulfillment.NewController(fulfillment.Options{
		Kube: o.Kube, APIReader: o.APIReader, Clock: o.Clock, Recorder: o.Recorder, Executor: o.Executor, Unavailable: o.Unavailable,
		Namespace: o.Namespace, StateNamespace: o.StateNamespace, TofuPath: o.TofuPath, RunnerShortcuts: o.RunnerShortcuts,
		RunEnv: o.RunEnv, DestroyDeadline: o.DestroyDeadline, RetryBackoff: o.RetryBackoff, Families: o.Families, ClusterName: o.ClusterName,
		ServerVersion: serverVersion(o.RESTConfig),
	})
	switch e := o.Executor.(type) {
	case *executor.Local:
		e.OnEnd = fulfillments.RunEnded
	case *executor.Job:
		e.OnEnd = fulfillments.RunEnded // reported once its cache runs (StartCache)
	}
	ours := []controller.Controller{
		nodeclass.NewController(nodeclass.Options{Kube: o.Kube, APIReader: o.APIReader, Clock: o.Clock, Recorder: o.Recorder,
			SecretNamespace: o.Namespace, Families: o.Families, Cluster: o.ClusterName, TokenAuthProbe: o.RESTConfig,
			TofuPath: o.TofuPath, ModuleDir: o.ModuleDir, ModuleRefresh: o.ModuleRefresh}),
		garbagecollection.NewSecretCollector(garbagecollection.SecretOptions{Kube: o.Kube, APIReader: o.APIReader, Clock: o.Clock,
			Namespace: o.Namespace, Interval: 20 * time.Second}),
		garbagecollection.NewMachineCollector(garbagecollection.MachineOptions{Kube: o.Kube, APIReader: o.APIReader, Clock: o.Clock,
			Recorder: o.Recorder, Families: o.Families, Cluster: o.ClusterName, Namespace: o.Namespace, StateNamespace: o.StateNamespace,
			Grace: o.OrphanGrace, Spend: o.spendAPI()}),
		pool.NewKeeper(pool.Options{Kube: o.Kube, APIReader: o.APIReader, Clock: o.Clock, Recorder: o.Recorder, Families: o.Families,
			SecretNamespace: o.Namespace, StateNamespace: o.StateNamespace, Cluster: o.ClusterName, Interval: o.PoolKeeperInterval}),
		scaledown.NewController(scaledown.Options{Kube: o.Kube, Clock: o.Clock, Recorder: o.Recorder, Families: o.Families}),
		fulfillments,
	}
	if o.ConditionRecorder != nil {
		ours = append(ours, conditionControllers(o)...)
	}
	return ours
}

// conditionControllers are operatorpkg's status-condition controllers of the fulfiller's
// types, as Karpenter core runs them for NodeClaims and NodePools: per condition of each
// object a count and the seconds in its current status, transitions counted and timed, time
// to terminate, and an event on each transition. A Fulfillment's transitions and durations
// carry its NodePool, class and node type (bounded by the catalogues); the per-object gauges
// carry its name, as Karpenter's NodeClaim ones do, and go with the object.
func conditionControllers(o Options) []controller.Controller {
	buckets := status.WithHistogramBuckets(prometheus.ExponentialBuckets(0.5, 2, 15)) // Karpenter's: 0.5 s … 8192 s
	return []controller.Controller{
		status.NewController[*v1alpha1.TofuNodeClass](o.Kube, o.ConditionRecorder, buckets),
		status.NewController[*v1alpha1.Fulfillment](o.Kube, o.ConditionRecorder, buckets,
			status.WithFields(map[string]string{"nodepool": ".spec.nodePool", "class": ".spec.nodeClass", "instance_type": ".spec.nodeType"})),
	}
}

// serverVersion reads the API server's version, without a distribution's suffix
// (v1.36.3+k3s1 is v1.36.3); nil without a configuration.
func serverVersion(cfg *rest.Config) func(context.Context) (string, error) {
	if cfg == nil {
		return nil
	}
	return func(context.Context) (string, error) {
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return "", err
		}
		info, err := dc.ServerVersion()
		if err != nil {
			return "", err
		}
		v, err := version.ParseGeneric(info.GitVersion)
		if err != nil {
			return "", fmt.Errorf("the API server's version %q: %w", info.GitVersion, err)
		}
		return fmt.Sprintf("v%d.%d.%d", v.Major(), v.Minor(), v.Patch()), nil
	}
}

// spendAPI takes requests made outside runs from the runs' API budgets; nil without them.
func (o Options) spendAPI() func(executor.APIDemand) {
	if o.APIBudgets == nil {
		return nil
	}
	return o.APIBudgets.Take
}
