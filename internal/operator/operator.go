// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package operator assembles the controller: Karpenter core, as its kwok provider does, with
// the fulfiller's CloudProvider (decorated with core's metrics, then with its NodeOverlays)
// and controllers.
package operator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/samber/lo"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/metrics"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"

	"github.com/fulfiller-sh/fulfiller/internal/claims"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// Run starts the controller and blocks. Flags come from the process's command line (the
// caller strips its own sub-command first). families are the node-type families classes may
// name.
func Run(families family.Registry) {
	// Before Karpenter's controllers start: they read its NormalizedLabels unguarded.
	if err := families.NormalizeZoneLabels(); err != nil {
		fmt.Fprintln(os.Stderr, "fulfiller controller:", err)
		os.Exit(1)
	}
	ctx, op := operator.NewOperator()
	opts := FromContext(ctx)
	// The embedded Karpenter core works only with its own version's CRDs.
	crds := apiextensionsclient.NewForConfigOrDie(op.GetConfig()).ApiextensionsV1().CustomResourceDefinitions()
	if err := CheckKarpenterCRDs(ctx, crds, karpenterapis.CRDs, KarpenterCoreVersion()); err != nil {
		log.FromContext(ctx).Error(err, "refusing to start")
		os.Exit(1)
	}
	if opts.EncryptionSecret != "" {
		lo.Must0(ensurePassphrase(ctx, kubernetes.NewForConfigOrDie(op.GetConfig()), opts))
	}
	apiBudgets := executor.NewAPIBudgets(op.Clock, families.APIDemands)
	crmetrics.Registry.MustRegister(apiBudgets) // fulfiller_api_budget_requests_left and _limit
	runs, tofu, runEnv := newExecutor(ctx, op, opts, families, apiBudgets)
	o := claims.Options{
		Kube:               op.GetClient(),
		APIReader:          op.Manager.GetAPIReader(),
		Clock:              op.Clock,
		Recorder:           op.EventRecorder,
		ConditionRecorder:  op.Manager.GetEventRecorderFor("fulfiller"), //nolint:staticcheck // SA1019: operatorpkg's status controller takes a record.EventRecorder
		RESTConfig:         op.GetConfig(),
		Executor:           runs,
		Unavailable:        cloudprovider.NewUnavailableOfferings(op.Clock, cloudprovider.UnavailableOfferingsTTL),
		Families:           families,
		ClusterName:        opts.ClusterName,
		Namespace:          opts.Namespace,
		StateNamespace:     opts.StateNamespace,
		TofuPath:           tofu,
		RunnerShortcuts:    opts.RunnerShortcuts,
		RunEnv:             runEnv,
		DestroyDeadline:    opts.DestroyDeadline,
		RetryBackoff:       opts.RetryBackoff,
		OrphanGrace:        opts.OrphanGrace,
		PoolKeeperInterval: opts.PoolKeeperInterval,
		ModuleRefresh:      opts.ModuleRefresh,
		RepairToleration:   opts.RepairToleration,
		APIBudgets:         apiBudgets,
		Overlays:           op.InstanceTypeStore,
	}
	provider := claims.NewCloudProvider(o)
	// Karpenter's controllers and cluster state see the instance types with the NodeOverlays
	// applied (while the NodeOverlay gate is on); its NodeOverlay controller validates the
	// overlays against the types as they are.
	undecorated := metrics.Decorate(provider)
	cloudProvider := overlay.Decorate(undecorated, op.GetClient(), op.InstanceTypeStore)
	matcher := lo.Must(health.NewRepairPolicyMatcher(ctx, cloudProvider))
	cluster := state.NewCluster(op.Clock, op.GetClient(), cloudProvider, state.WithRepairPolicyMatcher(matcher))

	ours := claims.NewControllers(o)
	if jobs, ok := runs.(*executor.Job); ok {
		// Admission and polling read the runner Jobs and pods from a watch of the namespace,
		// which also reports each run's end (started once the controllers set OnEnd).
		lo.Must0(jobs.StartCache(ctx))
	}
	op.
		WithControllers(ctx, controllers.NewControllers(ctx, op.Manager, op.Clock, op.GetClient(), op.EventRecorder,
			cloudProvider, undecorated, cluster, op.InstanceTypeStore, op.PredictionStore)...).
		WithControllers(ctx, ours...).
		Start(ctx)
}

// newExecutor builds the executor the options name, the tofu path runners use and extra
// environment for runs. Its runs are limited by what is scarce (executor.Limiter): the
// cluster's capacity for runner pods (Job executor) or this machine (local executor), the API
// budgets of the families' clouds (apiBudgets, which the orphan collector draws on too), and
// FULFILLER_MAX_CONCURRENT_RUNS when it is set.
func newExecutor(ctx context.Context, op *operator.Operator, opts *Options, families family.Registry, apiBudgets *executor.APIBudgets) (executor.Executor, string, map[string]string) {
	logger := log.FromContext(ctx)
	runEnv := map[string]string{}
	var budgets []executor.Budget
	if opts.MaxConcurrentRuns > 0 {
		budgets = append(budgets, executor.MaxRuns(opts.MaxConcurrentRuns))
	}
	if opts.Executor == ExecutorJob {
		jobs := opts.runnerPod() // checked when the options were parsed
		jobs.Client = kubernetes.NewForConfigOrDie(op.GetConfig())
		jobs.Namespace = opts.Namespace
		jobs.Image = opts.RunnerImage
		jobs.ImagePullPolicy = corev1.PullPolicy(opts.RunnerImagePullPolicy)
		jobs.ServiceAccountName = opts.RunnerServiceAccount
		jobs.TTLAfterFinished = opts.RunnerTTL
		runners := &executor.ClusterRunners{Placement: jobs.Placement(), Observe: observeCluster(op.GetClient())}
		jobs.Limiter = executor.NewLimiter(append(budgets, runners, apiBudgets)...)
		logger.Info("runs limited by the cluster's capacity for runner pods", "maxConcurrentRuns", opts.MaxConcurrentRuns)
		return jobs, opts.TofuPath, runEnv
	}
	// Local runs use this machine's tofu: it must be there and of a supported version.
	tofu, tofuVersion, err := tfrunner.FindTofu(ctx, opts.TofuPath)
	if err != nil {
		logger.Error(err, "the local executor cannot run tofu (--tofu-path, FULFILLER_TOFU)", "supported", tfrunner.SupportedTofu)
		lo.Must0(err)
	}
	logger.Info("local runs use tofu", "path", tofu, "version", tofuVersion.String())
	if opts.RunnerKubeconfig != "" {
		// The kubernetes backend reads KUBE_CONFIG_PATH; provisioners read KUBECONFIG, or
		// FULFILLER_KUBECONFIG, which runs in a pod get too.
		runEnv["KUBE_CONFIG_PATH"] = opts.RunnerKubeconfig
		runEnv["KUBECONFIG"] = opts.RunnerKubeconfig
		runEnv[tfrunner.ClusterKubeconfigEnv] = opts.RunnerKubeconfig
	}
	machine := lo.Must(executor.ThisMachine())
	logger.Info("runs limited by this machine", "bound", machine.Max(), "cpus", machine.CPUs, "memory", machine.Memory, "maxConcurrentRuns", opts.MaxConcurrentRuns)
	limiter := executor.NewLimiter(append(budgets, machine, apiBudgets)...)
	return &executor.Local{Dir: opts.RunsDir, Limiter: limiter, Nice: executor.LocalRunNice}, tofu, runEnv
}

// observeCluster lists the nodes and pods from the manager's cache (Karpenter's cluster state
// watches both), without copies: the runner capacity only reads them.
func observeCluster(c client.Reader) func(ctx context.Context) ([]*corev1.Node, []*corev1.Pod, error) {
	return func(ctx context.Context) ([]*corev1.Node, []*corev1.Pod, error) {
		nodes := &corev1.NodeList{}
		if err := c.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
			return nil, nil, fmt.Errorf("listing nodes: %w", err)
		}
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.UnsafeDisableDeepCopy); err != nil {
			return nil, nil, fmt.Errorf("listing pods: %w", err)
		}
		return pointers(nodes.Items), pointers(pods.Items), nil
	}
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// ensurePassphrase creates the state encryption passphrase Secret on the first start (every
// replica may try: one creates it, the others keep it), retrying while the API server is not
// reachable yet. A Secret that exists is never changed; one that cannot be used is logged, and
// the classes that name it say so.
func ensurePassphrase(ctx context.Context, client kubernetes.Interface, opts *Options) error {
	logger := log.FromContext(ctx).WithValues("secret", opts.Namespace+"/"+opts.EncryptionSecret)
	return wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		created, err := statelock.EnsurePassphrase(ctx, client, opts.Namespace, opts.EncryptionSecret, opts.EncryptionSecretKey)
		switch {
		case created:
			logger.Info("created the state encryption passphrase; back it up: without it no encrypted state can be read")
		case errors.Is(err, statelock.ErrUnusablePassphraseSecret):
			logger.Error(err, "the state encryption passphrase secret cannot be used")
			return true, nil
		case err != nil:
			logger.Error(err, "ensuring the state encryption passphrase")
			return false, nil
		}
		return true, nil
	})
}
