// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package operator

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	valid := func() *Options {
		return &Options{ClusterName: "prod-eu", OrphanGrace: 10 * time.Minute, Executor: ExecutorJob, RunnerImage: "ghcr.io/fulfiller-sh/fulfiller:v0",
			MaxConcurrentRuns: 8, RunnerTTL: time.Hour, DestroyDeadline: time.Hour, PoolKeeperInterval: 10 * time.Second, RetryBackoff: 5 * time.Second,
			repairToleration: "30m"}
	}
	o := valid()
	o.runnerResources = `{"requests":{"cpu":"200m","memory":"300Mi"}}`
	o.runnerNodeSelector = `{"node-role.kubernetes.io/control-plane":""}`
	o.runnerTolerations = `[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]`
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if o.RepairToleration != 30*time.Minute {
		t.Errorf("repair toleration %s, want 30m", o.RepairToleration)
	}
	if o.RunnerResources.Requests.Cpu().String() != "200m" || len(o.RunnerNodeSelector) != 1 || len(o.RunnerTolerations) != 1 {
		t.Errorf("parsed %+v %v %v", o.RunnerResources, o.RunnerNodeSelector, o.RunnerTolerations)
	}
	// The runner pods' extra settings, as the chart renders them.
	o = valid()
	o.RunnerPriorityClass = DefaultRunnerPriorityClass
	o.runnerPullSecrets = `[{"name":"registry"}]`
	o.runnerPodLabels = `{"example.com/team":"platform"}`
	o.runnerPodAnnots = `{"sidecar.istio.io/inject":"false"}`
	o.runnerEnv = `[{"name":"HTTPS_PROXY","value":"http://proxy:3128"}]`
	o.runnerEnvFrom = `[{"secretRef":{"name":"s3"}}]`
	o.runnerVolumes = `[{"name":"ca","configMap":{"name":"ca-bundle"}}]`
	o.runnerVolumeMounts = `[{"name":"ca","mountPath":"/etc/ssl/extra","readOnly":true}]`
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	pod := o.runnerPod()
	if pod.PriorityClassName != DefaultRunnerPriorityClass || pod.ImagePullSecrets[0].Name != "registry" || pod.PodLabels["example.com/team"] != "platform" ||
		pod.PodAnnotations["sidecar.istio.io/inject"] != "false" || pod.TofuEnv[0].Value != "http://proxy:3128" || pod.TofuEnvFrom[0].SecretRef.Name != "s3" ||
		pod.Volumes[0].ConfigMap.Name != "ca-bundle" || !pod.VolumeMounts[0].ReadOnly {
		t.Errorf("runner pod settings %+v", pod)
	}
	for _, tc := range []struct {
		name, want string
		change     func(*Options)
	}{
		{"job without image", "needs a runner image", func(o *Options) { o.RunnerImage = "" }},
		{"unknown executor", `executor "docker" is not supported`, func(o *Options) { o.Executor = "docker" }},
		{"negative runs", "must not be negative", func(o *Options) { o.MaxConcurrentRuns = -1 }},
		{"bad resources", "parsing runner-resources", func(o *Options) { o.runnerResources = `{"requests":` }},
		{"zero deadline", "must be positive", func(o *Options) { o.DestroyDeadline = 0 }},
		{"zero pool keeper interval", "must be positive", func(o *Options) { o.PoolKeeperInterval = 0 }},
		{"zero retry backoff", "must be positive", func(o *Options) { o.RetryBackoff = 0 }},
		{"no cluster name", "--cluster-name (FULFILLER_CLUSTER_NAME) is required", func(o *Options) { o.ClusterName = "" }},
		{"bad cluster name", "is no label value", func(o *Options) { o.ClusterName = "prod eu" }},
		{"short grace", "under a minute", func(o *Options) { o.OrphanGrace = time.Second }},
		{"repair toleration no duration", `--repair-toleration (FULFILLER_REPAIR_TOLERATION) "30" is no duration`, func(o *Options) { o.repairToleration = "30" }},
		{"short repair toleration", "--repair-toleration 5s is under 10s", func(o *Options) { o.repairToleration = "5s" }},
		{"negative repair toleration", "--repair-toleration -1m0s is under 10s", func(o *Options) { o.repairToleration = "-1m" }},
		{"a mount for a volume", `parsing runner-volumes: json: unknown field "mountPath"`, func(o *Options) { o.runnerVolumes = `[{"name":"ca","mountPath":"/etc/ca"}]` }},
		{"runner's own label", "pod label karpenter.sh/nodeclaim is the executor's own", func(o *Options) { o.runnerPodLabels = `{"karpenter.sh/nodeclaim":"x"}` }},
		{"mount of no volume", "volume mount ca names none of the extra volumes", func(o *Options) { o.runnerVolumeMounts = `[{"name":"ca","mountPath":"/etc/ca"}]` }},
		{"terraform-exec's variable", "TF_LOG", func(o *Options) { o.runnerEnv = `[{"name":"TF_LOG","value":"debug"}]` }},
	} {
		o := valid()
		tc.change(o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	local := &Options{ClusterName: "dev", OrphanGrace: time.Minute, Executor: ExecutorLocal, MaxConcurrentRuns: 1, RunnerTTL: time.Hour, DestroyDeadline: time.Hour, PoolKeeperInterval: 10 * time.Second, RetryBackoff: time.Second,
		repairToleration: "20s"}
	if err := local.validate(); err != nil {
		t.Errorf("the local executor needs no image: %v", err)
	}
}
