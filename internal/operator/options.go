// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package operator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/utils/env"

	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/claims/garbagecollection"
	"github.com/fulfiller-sh/fulfiller/internal/claims/nodeclass"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

func init() {
	coreoptions.Injectables = append(coreoptions.Injectables, &Options{})
}

type optionsKey struct{}

// Executors.
const (
	// ExecutorJob runs each tofu run as a Kubernetes Job (the default, in a cluster).
	ExecutorJob = "job"
	// ExecutorLocal runs each tofu run as a child process (the local environment).
	ExecutorLocal = "local"
)

// Options are the fulfiller's own controller flags; each also reads an environment variable.
// They are parsed with Karpenter's, from the same command line.
type Options struct {
	// ClusterName is this cluster's name: the modules label every machine with it
	// (keys.LabelCluster), and the orphan collector deletes only machines that carry it.
	ClusterName string
	// OrphanGrace is how old an orphaned machine or state must be before it is collected.
	OrphanGrace    time.Duration
	Namespace      string
	StateNamespace string
	// EncryptionSecret names a Secret in Namespace that the controller creates, with a random
	// passphrase under EncryptionSecretKey, when it does not exist (empty: none).
	EncryptionSecret    string
	EncryptionSecretKey string
	Executor            string
	RunsDir             string
	TofuPath            string
	// RunnerShortcuts turns on the runner's fast paths (tfrunner.Request.Shortcuts): the local
	// executor's module cache and providers started once per run for tofu to reattach to.
	// They rest on tofu's private files and are honoured only for tfrunner.ShortcutsTofu.
	RunnerShortcuts bool
	// MaxConcurrentRuns caps the runs in progress at once (0: no cap of its own).
	MaxConcurrentRuns int
	RunnerKubeconfig  string

	// Job executor settings.
	RunnerImage           string
	RunnerImagePullPolicy string
	RunnerServiceAccount  string
	RunnerTTL             time.Duration
	DestroyDeadline       time.Duration
	// RetryBackoff is the first wait before a failed run is tried again.
	RetryBackoff time.Duration
	// PoolKeeperInterval is how often the pools of finite families (Hetzner Robot) are looked after.
	PoolKeeperInterval time.Duration
	// ModuleRefresh is how often a class's module source is resolved again.
	ModuleRefresh time.Duration
	// RepairToleration is how long a Node may be NotReady or Unknown before Karpenter's node
	// repair (its NodeRepair feature gate) replaces it.
	RepairToleration time.Duration
	repairToleration string
	// RunnerPriorityClass is the PriorityClass of runner pods (empty: none).
	RunnerPriorityClass string
	runnerResources     string
	runnerNodeSelector  string
	runnerTolerations   string
	runnerPullSecrets   string
	runnerPodLabels     string
	runnerPodAnnots     string
	runnerEnv           string
	runnerEnvFrom       string
	runnerVolumes       string
	runnerVolumeMounts  string
	RunnerResources     *corev1.ResourceRequirements
	RunnerNodeSelector  map[string]string
	RunnerTolerations   []corev1.Toleration
	// The runner pods' extra settings (executor.Job's fields of the same names).
	RunnerImagePullSecrets []corev1.LocalObjectReference
	RunnerPodLabels        map[string]string
	RunnerPodAnnotations   map[string]string
	RunnerTofuEnv          []corev1.EnvVar
	RunnerTofuEnvFrom      []corev1.EnvFromSource
	RunnerVolumes          []corev1.Volume
	RunnerVolumeMounts     []corev1.VolumeMount
}

// MinRepairToleration is the shortest --repair-toleration taken.
const MinRepairToleration = 10 * time.Second

// DefaultRunnerPriorityClass is the runner pods' PriorityClass unless one is set, as
// Karpenter's chart gives its controller: provisioning must go on when the cluster is full.
const DefaultRunnerPriorityClass = "system-cluster-critical"

func (o *Options) AddFlags(fs *coreoptions.FlagSet) {
	fs.StringVar(&o.ClusterName, "cluster-name", env.WithDefaultString("FULFILLER_CLUSTER_NAME", ""), "This cluster's name (required), labelled on every machine (fulfiller.sh/cluster); the orphan collector deletes only machines that carry it")
	fs.DurationVar(&o.OrphanGrace, "orphan-grace", env.WithDefaultDuration("FULFILLER_ORPHAN_GRACE", garbagecollection.DefaultOrphanGrace), "How old a machine or state without a claim must be before the orphan collector deletes it")
	fs.StringVar(&o.Namespace, "fulfiller-namespace", env.WithDefaultString("FULFILLER_NAMESPACE", "fulfiller"), "Namespace of runs, claims' user data and the Secrets classes name")
	fs.StringVar(&o.StateNamespace, "state-namespace", env.WithDefaultString("FULFILLER_STATE_NAMESPACE", ""), "Namespace of the claims' states and locks (kubernetes backend; empty: the fulfiller namespace); runners need Secrets and Leases there only")
	fs.StringVar(&o.EncryptionSecret, "encryption-secret", env.WithDefaultString("FULFILLER_ENCRYPTION_SECRET", ""), "Secret in the fulfiller namespace to create with a random state encryption passphrase when it is missing (empty: none)")
	fs.StringVar(&o.EncryptionSecretKey, "encryption-secret-key", env.WithDefaultString("FULFILLER_ENCRYPTION_SECRET_KEY", "passphrase"), "Key of the passphrase in --encryption-secret")
	fs.StringVar(&o.Executor, "executor", env.WithDefaultString("FULFILLER_EXECUTOR", ExecutorJob), "Where tofu runs: job (a Kubernetes Job per run) or local (child processes)")
	fs.StringVar(&o.RunsDir, "runs-dir", env.WithDefaultString("FULFILLER_RUNS_DIR", "/var/lib/fulfiller/runs"), "Folder of local runs (working directories and logs)")
	fs.StringVar(&o.TofuPath, "tofu-path", env.WithDefaultString("FULFILLER_TOFU", "tofu"), "The tofu binary (in the runner's image for the job executor)")
	fs.BoolVarWithEnv(&o.RunnerShortcuts, "runner-shortcuts", "FULFILLER_RUNNER_SHORTCUTS", false, "Turn on the runner's fast paths, which rest on tofu's private files and undocumented behaviour: local runs share initialised modules (a module cache), and every run starts each provider once for tofu to reattach to instead of tofu starting it for every step; honoured only for tofu "+tfrunner.ShortcutsTofu+", off by default")
	fs.IntVar(&o.MaxConcurrentRuns, "max-concurrent-runs", env.WithDefaultInt("FULFILLER_MAX_CONCURRENT_RUNS", 0), "Cap on tofu runs in progress at once (0: none; runs are limited by the cluster's capacity for runner pods, or this machine's CPUs and memory, and the families' API budgets)")
	fs.StringVar(&o.RunnerKubeconfig, "runner-kubeconfig", env.WithDefaultString("FULFILLER_RUNNER_KUBECONFIG", ""), "Kubeconfig local runs use for the kubernetes state backend (empty: runners use their service account)")
	fs.StringVar(&o.RunnerImage, "runner-image", env.WithDefaultString("FULFILLER_RUNNER_IMAGE", ""), "Image of runner Jobs (the controller's image)")
	fs.StringVar(&o.RunnerImagePullPolicy, "runner-image-pull-policy", env.WithDefaultString("FULFILLER_RUNNER_IMAGE_PULL_POLICY", string(corev1.PullIfNotPresent)), "Pull policy of runner Jobs")
	fs.StringVar(&o.RunnerServiceAccount, "runner-service-account", env.WithDefaultString("FULFILLER_RUNNER_SERVICE_ACCOUNT", "fulfiller-runner"), "ServiceAccount of runner Jobs (RBAC for the state backend only)")
	fs.DurationVar(&o.RunnerTTL, "runner-ttl", env.WithDefaultDuration("FULFILLER_RUNNER_TTL", 24*time.Hour), "How long finished runner Jobs, and so their logs, are kept")
	fs.DurationVar(&o.PoolKeeperInterval, "pool-keeper-interval", env.WithDefaultDuration("FULFILLER_POOL_KEEPER_INTERVAL", 10*time.Second), "How often the pools of finite families (Hetzner Robot servers) are looked after: leases, reinstalls back to standby, installs ahead of need, quarantine")
	fs.DurationVar(&o.ModuleRefresh, "module-refresh-interval", env.WithDefaultDuration("FULFILLER_MODULE_REFRESH_INTERVAL", nodeclass.DefaultModuleRefresh), "How often a class's module source is resolved again (a git ref's commit, the content's digest); claims are created with the last resolution")
	// A string parsed in validate: a value that is no duration is an error, not the default.
	fs.StringVar(&o.repairToleration, "repair-toleration", env.WithDefaultString("FULFILLER_REPAIR_TOLERATION", cloudprovider.DefaultRepairToleration.String()), "How long a Node's Ready condition may be False or Unknown before the repair policies replace the node (with Karpenter's NodeRepair feature gate on)")
	fs.DurationVar(&o.DestroyDeadline, "destroy-deadline", env.WithDefaultDuration("FULFILLER_DESTROY_DEADLINE", run.DefaultDestroyDeadline), "Longest a tofu destroy may run (an apply is bounded by its node type's deadlines.apply)")
	fs.DurationVar(&o.RetryBackoff, "retry-backoff", env.WithDefaultDuration("FULFILLER_RETRY_BACKOFF", run.DefaultRetryBackoff), "First wait before a failed tofu run is tried again; it doubles per attempt, up to 60 times this")
	fs.StringVar(&o.runnerResources, "runner-resources", env.WithDefaultString("FULFILLER_RUNNER_RESOURCES", ""), "Resources of the runner container, as JSON of a ResourceRequirements")
	fs.StringVar(&o.runnerNodeSelector, "runner-node-selector", env.WithDefaultString("FULFILLER_RUNNER_NODE_SELECTOR", ""), "Node selector of runner pods, as a JSON map")
	fs.StringVar(&o.runnerTolerations, "runner-tolerations", env.WithDefaultString("FULFILLER_RUNNER_TOLERATIONS", ""), "Tolerations of runner pods, as a JSON list")
	fs.StringVar(&o.RunnerPriorityClass, "runner-priority-class", env.WithDefaultString("FULFILLER_RUNNER_PRIORITY_CLASS", DefaultRunnerPriorityClass), "PriorityClass of runner pods (empty: none)")
	fs.StringVar(&o.runnerPullSecrets, "runner-image-pull-secrets", env.WithDefaultString("FULFILLER_RUNNER_IMAGE_PULL_SECRETS", ""), "Image pull Secrets of runner pods, as a JSON list of {\"name\": ...}")
	fs.StringVar(&o.runnerPodLabels, "runner-pod-labels", env.WithDefaultString("FULFILLER_RUNNER_POD_LABELS", ""), "Extra labels of runner pods, as a JSON map")
	fs.StringVar(&o.runnerPodAnnots, "runner-pod-annotations", env.WithDefaultString("FULFILLER_RUNNER_POD_ANNOTATIONS", ""), "Extra annotations of runner pods, as a JSON map")
	fs.StringVar(&o.runnerEnv, "runner-env", env.WithDefaultString("FULFILLER_RUNNER_ENV", ""), "Environment variables of tofu and its providers in every run, as a JSON list of EnvVar")
	fs.StringVar(&o.runnerEnvFrom, "runner-env-from", env.WithDefaultString("FULFILLER_RUNNER_ENV_FROM", ""), "Secrets and ConfigMaps whose keys become environment variables of tofu in every run, as a JSON list of EnvFromSource")
	fs.StringVar(&o.runnerVolumes, "runner-volumes", env.WithDefaultString("FULFILLER_RUNNER_VOLUMES", ""), "Extra volumes of runner pods, as a JSON list of Volume")
	fs.StringVar(&o.runnerVolumeMounts, "runner-volume-mounts", env.WithDefaultString("FULFILLER_RUNNER_VOLUME_MOUNTS", ""), "Mounts of the extra volumes in the runner container, as a JSON list of VolumeMount")
}

func (o *Options) Parse(fs *coreoptions.FlagSet, args ...string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		return fmt.Errorf("parsing flags: %w", err)
	}
	return o.validate()
}

func (o *Options) validate() error {
	if o.ClusterName == "" {
		return errors.New("--cluster-name (FULFILLER_CLUSTER_NAME) is required: the modules label every machine with it, and the orphan collector deletes only machines that carry it")
	}
	if errs := validation.IsValidLabelValue(o.ClusterName); len(errs) > 0 {
		return fmt.Errorf("--cluster-name %q is no label value: %s", o.ClusterName, strings.Join(errs, "; "))
	}
	if o.OrphanGrace < time.Minute {
		return fmt.Errorf("--orphan-grace %s is under a minute: a machine whose claim is being created could be taken for an orphan", o.OrphanGrace)
	}
	switch o.Executor {
	case ExecutorLocal:
	case ExecutorJob:
		if o.RunnerImage == "" {
			return errors.New("the job executor needs a runner image (--runner-image or FULFILLER_RUNNER_IMAGE)")
		}
	default:
		return fmt.Errorf("executor %q is not supported (want job or local)", o.Executor)
	}
	if o.repairToleration != "" {
		d, err := time.ParseDuration(o.repairToleration)
		if err != nil {
			return fmt.Errorf("--repair-toleration (FULFILLER_REPAIR_TOLERATION) %q is no duration (such as 30m or 5m30s): %w", o.repairToleration, err)
		}
		o.RepairToleration = d
	}
	if o.RepairToleration < MinRepairToleration {
		return fmt.Errorf("--repair-toleration %s is under %s: a node would be replaced for a status update or two that came late (a kubelet reports every 10s by default)", o.RepairToleration, MinRepairToleration)
	}
	if o.MaxConcurrentRuns < 0 {
		return errors.New("max-concurrent-runs must not be negative (0: no cap)")
	}
	if o.RunnerTTL <= 0 || o.DestroyDeadline <= 0 || o.PoolKeeperInterval <= 0 || o.RetryBackoff <= 0 {
		return errors.New("runner-ttl, destroy-deadline, pool-keeper-interval and retry-backoff must be positive")
	}
	for _, f := range []struct {
		name, value string
		into        any
	}{
		{"runner-resources", o.runnerResources, &o.RunnerResources},
		{"runner-node-selector", o.runnerNodeSelector, &o.RunnerNodeSelector},
		{"runner-tolerations", o.runnerTolerations, &o.RunnerTolerations},
		{"runner-image-pull-secrets", o.runnerPullSecrets, &o.RunnerImagePullSecrets},
		{"runner-pod-labels", o.runnerPodLabels, &o.RunnerPodLabels},
		{"runner-pod-annotations", o.runnerPodAnnots, &o.RunnerPodAnnotations},
		{"runner-env", o.runnerEnv, &o.RunnerTofuEnv},
		{"runner-env-from", o.runnerEnvFrom, &o.RunnerTofuEnvFrom},
		{"runner-volumes", o.runnerVolumes, &o.RunnerVolumes},
		{"runner-volume-mounts", o.runnerVolumeMounts, &o.RunnerVolumeMounts},
	} {
		if f.value == "" {
			continue
		}
		// Strictly: a misspelt field of a volume or an env source is an error, not ignored.
		dec := json.NewDecoder(strings.NewReader(f.value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(f.into); err != nil {
			return fmt.Errorf("parsing %s: %w", f.name, err)
		}
	}
	if o.Executor == ExecutorJob {
		return o.runnerPod().Validate()
	}
	return nil
}

// runnerPod is a Job executor with the options' runner pod settings and nothing else, which
// Validate checks and newExecutor completes.
func (o *Options) runnerPod() *executor.Job {
	return &executor.Job{
		PriorityClassName: o.RunnerPriorityClass,
		ImagePullSecrets:  o.RunnerImagePullSecrets,
		PodLabels:         o.RunnerPodLabels,
		PodAnnotations:    o.RunnerPodAnnotations,
		TofuEnv:           o.RunnerTofuEnv,
		TofuEnvFrom:       o.RunnerTofuEnvFrom,
		Volumes:           o.RunnerVolumes,
		VolumeMounts:      o.RunnerVolumeMounts,
		NodeSelector:      o.RunnerNodeSelector,
		Tolerations:       o.RunnerTolerations,
		Resources:         o.RunnerResources,
	}
}

func (o *Options) ToContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, optionsKey{}, o)
}

// FromContext returns the options parsed into ctx.
func FromContext(ctx context.Context) *Options {
	o, _ := ctx.Value(optionsKey{}).(*Options)
	return o
}
