// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"
	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/operator"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

func TestLintStrict(t *testing.T) {
	overrides := filepath.Join(t.TempDir(), "overrides.yaml")
	writeFile(t, overrides, `
replicas: 1
runner:
  image: {repository: registry.example/fulfiller-runner, tag: v9}
  nodeSelector: {node-role.kubernetes.io/infra: ""}
  tolerations: [{key: infra, operator: Exists, effect: NoSchedule}]
  priorityClassName: ""
  podLabels: {example.com/team: platform}
  extraVolumes: [{name: ca, configMap: {name: ca-bundle}}]
  extraVolumeMounts: [{name: ca, mountPath: /etc/ssl/extra, readOnly: true}]
stateEncryption: {create: false, existingSecret: my-passphrase}
serviceMonitor: {enabled: true, endpointConfig: {interval: 30s}}
settings:
  ignoreDRARequests: false
  featureGates: {nodeRepair: true}
`)
	for _, args := range [][]string{{chart}, {chart, "-f", overrides}, {crdChart, "--set", "additionalAnnotations.a=b"}} {
		out, err := helmCmd(t, append([]string{"lint", "--strict", "--namespace", "fulfiller"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "0 chart(s) failed") {
			t.Fatalf("helm lint %v:\n%s", args, out)
		}
	}
}

func TestDefaults(t *testing.T) {
	m := render(t, "fulfiller-system")
	d, c, env := controller(t, m)

	// The fulfiller's own settings.
	want := map[string]string{
		"FULFILLER_NAMESPACE":                "fulfiller-system",
		"FULFILLER_EXECUTOR":                 "job",
		"FULFILLER_RUNNER_IMAGE":             c.Image,
		"FULFILLER_RUNNER_IMAGE_PULL_POLICY": "IfNotPresent",
		"FULFILLER_RUNNER_SERVICE_ACCOUNT":   "fulfiller-runner",
		"FULFILLER_RUNNER_TTL":               "24h",
		"FULFILLER_DESTROY_DEADLINE":         "30m",
		"FULFILLER_MAX_CONCURRENT_RUNS":      "0",
		"FULFILLER_RUNNER_NODE_SELECTOR":     "{}",
		"FULFILLER_RUNNER_TOLERATIONS":       "[]",
		"FULFILLER_STATE_NAMESPACE":          "fulfiller-system-states",
		"FULFILLER_ENCRYPTION_SECRET":        "fulfiller-state-encryption",
		"FULFILLER_ENCRYPTION_SECRET_KEY":    "passphrase",
		"FULFILLER_CLUSTER_NAME":             testClusterName,
		"FULFILLER_ORPHAN_GRACE":             "10m",
		"FULFILLER_MODULE_REFRESH_INTERVAL":  "10m",
		"FULFILLER_REPAIR_TOLERATION":        "30m",
		// Runner pods have the controller's priority class and nothing extra.
		"FULFILLER_RUNNER_PRIORITY_CLASS":     "system-cluster-critical",
		"FULFILLER_RUNNER_IMAGE_PULL_SECRETS": "[]",
		"FULFILLER_RUNNER_POD_LABELS":         "{}",
		"FULFILLER_RUNNER_POD_ANNOTATIONS":    "{}",
		"FULFILLER_RUNNER_ENV":                "[]",
		"FULFILLER_RUNNER_ENV_FROM":           "[]",
		"FULFILLER_RUNNER_VOLUMES":            "[]",
		"FULFILLER_RUNNER_VOLUME_MOUNTS":      "[]",
	}
	for name, value := range want {
		if got := envValue(t, env, name); got != value {
			t.Errorf("env %s = %q, want %q", name, got, value)
		}
	}
	if want := "ghcr.io/fulfiller-sh/fulfiller:" + projectVersion(t); c.Image != want {
		t.Errorf("image %q, want %q (the chart's appVersion as tag)", c.Image, want)
	}
	if !slices.Equal(c.Args, []string{"controller"}) {
		t.Errorf("args %v, want [controller] (the image's entrypoint is fulfiller)", c.Args)
	}
	var runnerRes corev1.ResourceRequirements
	strictJSON(t, envValue(t, env, "FULFILLER_RUNNER_RESOURCES"), &runnerRes)
	if q := runnerRes.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("runner memory limit %s, want 1Gi", q.String())
	}
	if q := runnerRes.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("100m")) != 0 {
		t.Errorf("runner cpu request %s, want 100m", q.String())
	}
	for _, name := range []string{"FULFILLER_RUNNER_TTL", "FULFILLER_DESTROY_DEADLINE"} {
		if _, err := time.ParseDuration(envValue(t, env, name)); err != nil {
			t.Errorf("env %s is not a Go duration: %v", name, err)
		}
	}

	if fopts := parseFulfillerOptions(t, env); fopts.RunnerPriorityClass != "system-cluster-critical" {
		t.Errorf("the controller reads runner priority class %q", fopts.RunnerPriorityClass)
	}
	// Karpenter core's settings: every literal env the chart sets is accepted by the options
	// parser of the Karpenter version the binary embeds.
	opts := parseKarpenterOptions(t, env)
	if opts.DisableLeaderElection {
		t.Error("leader election is disabled by default")
	}
	if opts.LeaderElectionNamespace != "fulfiller-system" || opts.LeaderElectionName != "fulfiller-leader-election" {
		t.Errorf("leader election lease %s/%s, want fulfiller-system/fulfiller-leader-election", opts.LeaderElectionNamespace, opts.LeaderElectionName)
	}
	if opts.FeatureGates != coreoptions.DefaultFeatureGates() {
		t.Errorf("feature gates %+v, want Karpenter's defaults %+v", opts.FeatureGates, coreoptions.DefaultFeatureGates())
	}
	if !opts.IgnoreDRARequests || opts.LogLevel != "info" || opts.BatchMaxDuration != 10*time.Second {
		t.Errorf("karpenter options %+v do not match the chart's defaults", opts)
	}
	for _, name := range []string{"MEMORY_LIMIT", "CPU_REQUESTS"} {
		if e := env[name]; e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.ContainerName != "controller" {
			t.Errorf("env %s should come from the controller container's resources, got %+v", name, e)
		}
	}

	// Probes and ports: health on Karpenter's health port, metrics behind the Service.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http-health"] != int32(opts.HealthProbePort) || ports["http-metrics"] != int32(opts.MetricsPort) {
		t.Errorf("container ports %v do not match HEALTH_PROBE_PORT %d / METRICS_PORT %d", ports, opts.HealthProbePort, opts.MetricsPort)
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "http-health" {
			t.Errorf("probe %+v, want GET %s on port http-health", probe, path)
		}
	}
	svc := find[*corev1.Service](t, m, "fulfiller-metrics")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http-metrics" {
		t.Errorf("metrics Service ports %+v, want one to http-metrics", svc.Spec.Ports)
	}
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("metrics Service selector %v does not select the pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}

	// Security: non-root, read-only root, the writable folders are emptyDirs.
	pod := d.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("the pod does not require a non-root user")
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v, want read-only root, no privilege escalation, all capabilities dropped", sc)
	}
	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		emptyDirs[v.Name] = v.EmptyDir != nil
	}
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		if !emptyDirs[vm.Name] {
			t.Errorf("mount %s is not an emptyDir", vm.Name)
		}
		mounts[vm.MountPath] = vm.Name
	}
	for _, path := range []string{"/tmp", "/var/lib/fulfiller"} {
		if mounts[path] == "" {
			t.Errorf("no emptyDir mounted at %s (mounts %v)", path, mounts)
		}
	}
	if runs := envValue(t, env, "FULFILLER_RUNS_DIR"); !strings.HasPrefix(runs, "/var/lib/fulfiller/") {
		t.Errorf("FULFILLER_RUNS_DIR %s is not on the writable volume", runs)
	}

	// Placement: never on nodes Karpenter manages; critical priority; a PDB.
	if !avoidsManagedNodes(pod.Affinity) {
		t.Errorf("affinity %+v does not keep the controller off nodes with karpenter.sh/nodepool", pod.Affinity)
	}
	if pod.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	pdb := find[*policyv1.PodDisruptionBudget](t, m, "fulfiller")
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget %+v", pdb.Spec)
	}
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *d.Spec.Replicas)
	}

	// ServiceAccounts: the controller's is the pod's; the runner's is what runners get.
	find[*corev1.ServiceAccount](t, m, pod.ServiceAccountName)
	find[*corev1.ServiceAccount](t, m, want["FULFILLER_RUNNER_SERVICE_ACCOUNT"])

	// State encryption is on, but the chart renders no passphrase (a render must not make a
	// new one): the controller creates the Secret when it is missing (FULFILLER_ENCRYPTION_SECRET).
	for _, s := range all[*corev1.Secret](m) {
		t.Errorf("the chart renders Secret %s", s.Name)
	}

	// The states have a namespace of their own, kept on uninstall; the runners' Role is there
	// and only there.
	stateNS := find[*corev1.Namespace](t, m, "fulfiller-system-states")
	if stateNS.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the state namespace is not kept on uninstall: %v", stateNS.Annotations)
	}
	for _, role := range all[*rbacv1.Role](m) {
		if role.Name == "fulfiller-runner" && role.Namespace != "fulfiller-system-states" {
			t.Errorf("runner Role in namespace %s", role.Namespace)
		}
	}
	if runner := find[*rbacv1.Role](t, m, "fulfiller-runner"); runner.Namespace != "fulfiller-system-states" {
		t.Errorf("runner Role in %s", runner.Namespace)
	}

	// No ServiceMonitor unless asked for; no DRA rules unless DRA is on.
	for _, u := range all[*unstructured.Unstructured](m) {
		t.Errorf("unexpected object %s %s", u.GetKind(), u.GetName())
	}
	core := find[*rbacv1.ClusterRole](t, m, "fulfiller-karpenter-core")
	if grants(core.Rules, "resource.k8s.io", "resourceslices", "list") {
		t.Error("DRA rules rendered although settings.ignoreDRARequests is true")
	}
}

func TestOverrides(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	writeFile(t, values, `
controller:
  image: {repository: registry.example/fulfiller, digest: "sha256:`+strings.Repeat("ab", 32)+`"}
  env: [{name: HTTPS_PROXY, value: "http://proxy:3128"}]
  envFrom: [{configMapRef: {name: controller-env}}]
  extraVolumeMounts: [{name: ca, mountPath: /etc/ssl/extra, readOnly: true}]
extraVolumes: [{name: ca, configMap: {name: ca-bundle}}]
imagePullSecrets: [{name: registry}]
runner:
  image: {repository: registry.example/runner, tag: v2}
  imagePullPolicy: Always
  serviceAccount: {name: tofu}
  ttl: 2h
  maxConcurrent: 3
  destroyDeadline: 1h30m
  resources: {requests: {cpu: "1", memory: 2Gi}, limits: {memory: 4Gi}}
  nodeSelector: {node-role.kubernetes.io/infra: ""}
  tolerations: [{key: infra, operator: Exists, effect: NoSchedule}]
  priorityClassName: tofu-runs
  podLabels: {example.com/team: platform}
  podAnnotations: {sidecar.istio.io/inject: "false"}
  env: [{name: HTTPS_PROXY, value: "http://proxy:3128"}, {name: SSL_CERT_FILE, value: /etc/ssl/extra/ca.pem}]
  envFrom: [{secretRef: {name: s3-credentials}, prefix: S3_}]
  extraVolumes: [{name: ca, configMap: {name: ca-bundle}}]
  extraVolumeMounts: [{name: ca, mountPath: /etc/ssl/extra, readOnly: true}]
leaderElection: {enabled: false}
replicas: 1
stateEncryption: {create: false, existingSecret: my-passphrase}
stateNamespace: {name: tofu-states, create: false}
serviceMonitor: {enabled: true, endpointConfig: {interval: 30s}, additionalLabels: {release: prom}, relabelings: [{action: labeldrop, regex: pod}]}
settings:
  ignoreDRARequests: false
  featureGates: {nodeRepair: true, spotToSpotConsolidation: true}
`)
	m := render(t, "tofu", "-f", values)
	d, c, env := controller(t, m)
	if c.Image != "registry.example/fulfiller@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image %q, want the digest", c.Image)
	}
	pod := d.Spec.Template.Spec
	if envValue(t, env, "HTTPS_PROXY") != "http://proxy:3128" || len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef.Name != "controller-env" {
		t.Errorf("controller env %v, envFrom %+v", c.Env, c.EnvFrom)
	}
	if len(pod.Volumes) != 3 || pod.Volumes[2].ConfigMap == nil || len(c.VolumeMounts) != 3 || c.VolumeMounts[2].MountPath != "/etc/ssl/extra" {
		t.Errorf("controller volumes %+v, mounts %+v", pod.Volumes, c.VolumeMounts)
	}
	// The runner pods' settings reach the controller, which accepts them.
	fopts := parseFulfillerOptions(t, env)
	if fopts.RunnerPriorityClass != "tofu-runs" || len(fopts.RunnerImagePullSecrets) != 1 || fopts.RunnerImagePullSecrets[0].Name != "registry" ||
		fopts.RunnerPodLabels["example.com/team"] != "platform" || fopts.RunnerPodAnnotations["sidecar.istio.io/inject"] != "false" ||
		len(fopts.RunnerTofuEnv) != 2 || fopts.RunnerTofuEnv[1].Value != "/etc/ssl/extra/ca.pem" ||
		len(fopts.RunnerTofuEnvFrom) != 1 || fopts.RunnerTofuEnvFrom[0].Prefix != "S3_" || fopts.RunnerTofuEnvFrom[0].SecretRef.Name != "s3-credentials" ||
		len(fopts.RunnerVolumes) != 1 || fopts.RunnerVolumes[0].ConfigMap.Name != "ca-bundle" || len(fopts.RunnerVolumeMounts) != 1 || !fopts.RunnerVolumeMounts[0].ReadOnly {
		t.Errorf("runner pod settings as the controller reads them: %+v", fopts)
	}
	want := map[string]string{
		"FULFILLER_NAMESPACE":                "tofu",
		"FULFILLER_RUNNER_IMAGE":             "registry.example/runner:v2",
		"FULFILLER_RUNNER_IMAGE_PULL_POLICY": "Always",
		"FULFILLER_RUNNER_SERVICE_ACCOUNT":   "tofu",
		"FULFILLER_RUNNER_TTL":               "2h",
		"FULFILLER_MAX_CONCURRENT_RUNS":      "3",
		"FULFILLER_DESTROY_DEADLINE":         "1h30m",
		"FULFILLER_STATE_NAMESPACE":          "tofu-states",
	}
	for name, value := range want {
		if got := envValue(t, env, name); got != value {
			t.Errorf("env %s = %q, want %q", name, got, value)
		}
	}
	var res corev1.ResourceRequirements
	strictJSON(t, envValue(t, env, "FULFILLER_RUNNER_RESOURCES"), &res)
	if q := res.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("4Gi")) != 0 {
		t.Errorf("runner memory limit %s, want 4Gi", q.String())
	}
	var selector map[string]string
	strictJSON(t, envValue(t, env, "FULFILLER_RUNNER_NODE_SELECTOR"), &selector)
	if v, ok := selector["node-role.kubernetes.io/infra"]; !ok || v != "" || len(selector) != 1 {
		t.Errorf("runner node selector %v", selector)
	}
	var tolerations []corev1.Toleration
	strictJSON(t, envValue(t, env, "FULFILLER_RUNNER_TOLERATIONS"), &tolerations)
	if len(tolerations) != 1 || tolerations[0].Key != "infra" || tolerations[0].Operator != corev1.TolerationOpExists || tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("runner tolerations %+v", tolerations)
	}
	opts := parseKarpenterOptions(t, env)
	if !opts.DisableLeaderElection || !opts.FeatureGates.NodeRepair || !opts.FeatureGates.SpotToSpotConsolidation || opts.IgnoreDRARequests {
		t.Errorf("karpenter options %+v do not follow the overrides", opts)
	}

	// The runner ServiceAccount keeps its given name, and its RoleBinding (in the state
	// namespace, which exists already) names it.
	find[*corev1.ServiceAccount](t, m, "tofu")
	rb := find[*rbacv1.RoleBinding](t, m, "fulfiller-runner")
	if len(rb.Subjects) != 1 || rb.Subjects[0].Name != "tofu" || rb.Subjects[0].Namespace != "tofu" || rb.Namespace != "tofu-states" {
		t.Errorf("runner RoleBinding %s/%s subjects %+v", rb.Namespace, rb.Name, rb.Subjects)
	}
	if nss := all[*corev1.Namespace](m); len(nss) != 0 {
		t.Errorf("namespace %s rendered with stateNamespace.create false", nss[0].Name)
	}
	// With an existing passphrase Secret, the controller creates none.
	if _, set := env["FULFILLER_ENCRYPTION_SECRET"]; set {
		t.Error("FULFILLER_ENCRYPTION_SECRET set with stateEncryption.existingSecret")
	}
	// An existing passphrase Secret: none is created.
	for _, s := range all[*corev1.Secret](m) {
		t.Errorf("unexpected Secret %s with stateEncryption.existingSecret set", s.Name)
	}
	sm := find[*unstructured.Unstructured](t, m, "fulfiller")
	if sm.GetKind() != "ServiceMonitor" || sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor %s with labels %v", sm.GetKind(), sm.GetLabels())
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if ep, _ := endpoints[0].(map[string]any); len(endpoints) != 1 || ep["interval"] != "30s" || ep["port"] != "http-metrics" || ep["relabelings"] == nil {
		t.Errorf("ServiceMonitor endpoints %v", endpoints)
	}
	core := find[*rbacv1.ClusterRole](t, m, "fulfiller-karpenter-core")
	if !grants(core.Rules, "resource.k8s.io", "resourceslices", "list") {
		t.Error("no DRA rules although settings.ignoreDRARequests is false")
	}
	if pdbs := all[*policyv1.PodDisruptionBudget](m); len(pdbs) != 1 {
		t.Errorf("%d PodDisruptionBudgets", len(pdbs))
	}
}

// TestTofuCLIConfig: tofu.cliConfig becomes a ConfigMap that the controller and every runner
// pod mount, with TF_CLI_CONFIG_FILE naming it, beside the runner's other volumes and
// variables; the controller accepts the runner pods' settings. Setting TF_CLI_CONFIG_FILE in
// runner.env as well is refused.
func TestTofuCLIConfig(t *testing.T) {
	const cliConfig = `provider_installation {
  filesystem_mirror {
    path    = "/opt/tofu/providers"
    include = ["*/*/*"]
  }
  network_mirror {
    url     = "https://mirror.example/providers/"
    include = ["*/*/*"]
  }
}
`
	values := filepath.Join(t.TempDir(), "values.yaml")
	writeFile(t, values, `
runner:
  env: [{name: SSL_CERT_FILE, value: /etc/ssl/extra/ca.pem}]
  extraVolumes: [{name: ca, configMap: {name: ca-bundle}}]
  extraVolumeMounts: [{name: ca, mountPath: /etc/ssl/extra, readOnly: true}]
tofu:
  cliConfig: |
`+indent(cliConfig, "    "))
	m := render(t, "tofu", "-f", values)
	cm := find[*corev1.ConfigMap](t, m, "fulfiller-tofu-cli-config")
	if cm.Namespace != "tofu" || cm.Data["tofurc"] != cliConfig {
		t.Errorf("ConfigMap %s/%s data %q, want the value in the release namespace", cm.Namespace, cm.Name, cm.Data)
	}
	d, c, env := controller(t, m)
	const file = "/etc/fulfiller/cli-config/tofurc"
	if envValue(t, env, "TF_CLI_CONFIG_FILE") != file || envValue(t, env, "FULFILLER_TOFU_ENV_TF_CLI_CONFIG_FILE") != file {
		t.Errorf("controller env %v: want TF_CLI_CONFIG_FILE and its tofu variable = %s", c.Env, file)
	}
	mounted := false
	for _, mnt := range c.VolumeMounts {
		if mnt.MountPath == filepath.Dir(file) {
			mounted = mnt.ReadOnly
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == mnt.Name && (v.ConfigMap == nil || v.ConfigMap.Name != cm.Name) {
					mounted = false
				}
			}
		}
	}
	if !mounted {
		t.Errorf("the controller does not mount ConfigMap %s read-only at %s: volumes %+v, mounts %+v", cm.Name, filepath.Dir(file), d.Spec.Template.Spec.Volumes, c.VolumeMounts)
	}
	opts := parseFulfillerOptions(t, env)
	var runnerEnv []string
	for _, e := range opts.RunnerTofuEnv {
		runnerEnv = append(runnerEnv, e.Name+"="+e.Value)
	}
	if !slices.Equal(runnerEnv, []string{"SSL_CERT_FILE=/etc/ssl/extra/ca.pem", "TF_CLI_CONFIG_FILE=" + file}) {
		t.Errorf("runner tofu env %v", runnerEnv)
	}
	if len(opts.RunnerVolumes) != 2 || opts.RunnerVolumes[0].Name != "ca" || opts.RunnerVolumes[1].ConfigMap == nil || opts.RunnerVolumes[1].ConfigMap.Name != cm.Name {
		t.Errorf("runner volumes %+v: want ca, then ConfigMap %s", opts.RunnerVolumes, cm.Name)
	}
	if len(opts.RunnerVolumeMounts) != 2 || opts.RunnerVolumeMounts[1].Name != opts.RunnerVolumes[1].Name ||
		opts.RunnerVolumeMounts[1].MountPath != filepath.Dir(file) || !opts.RunnerVolumeMounts[1].ReadOnly {
		t.Errorf("runner volume mounts %+v: want the ConfigMap read-only at %s", opts.RunnerVolumeMounts, filepath.Dir(file))
	}

	// Without the value nothing of it is rendered: runs use the image's configuration.
	plain := render(t, "tofu")
	for _, cm := range all[*corev1.ConfigMap](plain) {
		t.Errorf("ConfigMap %s rendered without tofu.cliConfig", cm.Name)
	}
	if _, _, env := controller(t, plain); env["TF_CLI_CONFIG_FILE"].Value != "" {
		t.Errorf("TF_CLI_CONFIG_FILE = %q without tofu.cliConfig", env["TF_CLI_CONFIG_FILE"].Value)
	}

	_, err := helmCmd(t, "template", "fulfiller", chart, "--set", "tofu.cliConfig=x,runner.env[0].name=TF_CLI_CONFIG_FILE,runner.env[0].value=/x")
	if err == nil || !strings.Contains(err.Error(), "use one of them") {
		t.Fatalf("tofu.cliConfig and TF_CLI_CONFIG_FILE in runner.env: %v", err)
	}
}

// indent prefixes every line of s with prefix.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

// TestRenderIsStable: rendering the chart twice gives the same manifest, as Argo CD and
// `helm template | kubectl apply` need: nothing random (a passphrase made anew on every
// render would make every encrypted state unreadable).
func TestRenderIsStable(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "stateEncryption.create=false,stateEncryption.existingSecret=mine"}} {
		render := func() string {
			out, err := helmCmd(t, append([]string{"template", "fulfiller", chart, "--namespace", "fulfiller"}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		if first, second := render(), render(); first != second {
			t.Errorf("two renders with %v differ", args)
		}
	}
}

// TestSchemaRejects checks that values.schema.json is strict: unknown keys at any level,
// wrong types and invalid settings fail `helm template` with the offending path.
func TestSchemaRejects(t *testing.T) {
	cases := []struct {
		set  string
		want string // in helm's error
	}{
		{"replica=2", "additional properties 'replica' not allowed"},
		{"runner.image.repo=x", "/runner/image"},
		{"runner.ttlSeconds=60", "/runner"},
		{"stateEncryption.passphrase=hunter2", "/stateEncryption"},
		{"settings.featureGates.NodeRepairs=true", "/settings/featureGates"},
		{"runner.ttl=1day", "/runner/ttl"},
		{"runner.destroyDeadline=30", "/runner/destroyDeadline"},
		// An apply's deadline is its node type's deadlines.apply; the chart has none of its own.
		{"runner.applyDeadline=30m", "additional properties 'applyDeadline' not allowed"},
		{"runner.maxConcurrent=-1", "/runner/maxConcurrent"},
		{"logLevel=warn", "/logLevel"},
		{"imagePullPolicy=Sometimes", "/imagePullPolicy"},
		{"controller.metrics.port=70000", "/controller/metrics/port"},
		{"controller.image.tags=v1", "/controller/image"},
		{"settings.preferencePolicy=Maybe", "/settings/preferencePolicy"},
		{"leaderElection.enabled=yes", "/leaderElection/enabled"},
		{"settings.clusterName=prod eu", "/settings/clusterName"},
		{"orphanGracePeriod=ten", "/orphanGracePeriod"},
		{"moduleRefreshInterval=often", "/moduleRefreshInterval"},
		{"settings.repairToleration=30", "/settings/repairToleration"},
		{"settings.featureGates.nodeRepairs=true", "/settings/featureGates"},
		{"runner.podLabels.team=5", "/runner/podLabels/team"},
		{"runner.extraVolumes[0].configMap.name=ca", "/runner/extraVolumes/0"},
		{"serviceMonitor.interval=30s", "/serviceMonitor"},
		// The names of chart 0.1.0 are checked as strictly as before.
		{"metrics.port=70000", "/metrics/port"},
		{"clusterName=prod eu", "/clusterName"},
	}
	for _, tc := range cases {
		t.Run(tc.set, func(t *testing.T) {
			args := []string{"template", "fulfiller", chart, "--namespace", "fulfiller"}
			if strings.HasSuffix(tc.set, "=yes") {
				args = append(args, "--set-string", tc.set)
			} else {
				args = append(args, "--set", tc.set)
			}
			_, err := helmCmd(t, args...)
			if err == nil {
				t.Fatalf("helm accepted --set %s", tc.set)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a schema error naming %q, got: %v", tc.want, err)
			}
		})
	}
	// Template-level checks.
	if _, err := helmCmd(t, "template", "fulfiller", chart, "--set", "settings.clusterName="); err == nil || !strings.Contains(err.Error(), "settings.clusterName is required") {
		t.Fatalf("no cluster name: %v", err)
	}
	_, err := helmCmd(t, "template", "fulfiller", chart, "--set", "stateEncryption.existingSecret=mine")
	if err == nil || !strings.Contains(err.Error(), "set either create or existingSecret") {
		t.Fatalf("create and existingSecret together: %v", err)
	}
	_, err = helmCmd(t, "template", "fulfiller", chart, "--set", "serviceMonitor.enabled=true,service.enabled=false")
	if err == nil || !strings.Contains(err.Error(), "needs service.enabled") {
		t.Fatalf("ServiceMonitor without Service: %v", err)
	}
}

// TestCRDChart checks what the fulfiller-crd chart renders: exactly the fulfiller's CRDs
// (api/crds) and those of the Karpenter core the binary embeds, each kept on uninstall, with
// specs equal to their sources; the fulfiller chart renders no CRD. Both charts name the
// embedded core's version, go.mod's.
func TestCRDChart(t *testing.T) {
	out, err := helmCmd(t, "template", "fulfiller-crd", crdChart, "--set", "additionalAnnotations.example\\.com/owner=platform")
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	version := testenv.GoModVersion(t, "sigs.k8s.io/karpenter")
	sources := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range karpenterapis.CRDs {
		sources[crd.Name] = crd
	}
	generated, err := filepath.Glob(filepath.Join(root, "api", "crds", "*.yaml"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("no generated CRDs in api/crds: %v", err)
	}
	for _, path := range generated {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		readYAML(t, path, crd)
		sources[crd.Name] = crd
	}
	rendered := all[*apiextensionsv1.CustomResourceDefinition](m)
	if len(rendered) != len(sources) || len(m.objects) != len(rendered) {
		t.Errorf("the CRD chart renders %s; want the %d CRDs of api/crds and Karpenter core %s, nothing else", m.summary(), len(sources), version)
	}
	for _, crd := range rendered {
		src, ok := sources[crd.Name]
		if !ok {
			t.Errorf("CRD %s is neither the fulfiller's nor Karpenter core's", crd.Name)
			continue
		}
		if !reflect.DeepEqual(normalizedJSON(t, crd.Spec), normalizedJSON(t, src.Spec)) {
			t.Errorf("CRD %s differs from its source: run make generate", crd.Name)
		}
		want := map[string]string{"helm.sh/resource-policy": "keep", "example.com/owner": "platform"}
		if strings.HasSuffix(crd.Spec.Group, "x-k8s.io") || crd.Spec.Group == "karpenter.sh" {
			want[operator.KarpenterCoreVersionAnnotation] = version
		}
		for k, v := range want {
			if crd.Annotations[k] != v {
				t.Errorf("CRD %s: annotation %s=%q, want %q", crd.Name, k, crd.Annotations[k], v)
			}
		}
	}
	for _, c := range []string{chart, crdChart} {
		var meta struct {
			KubeVersion string            `json:"kubeVersion"`
			Annotations map[string]string `json:"annotations"`
		}
		readYAML(t, filepath.Join(c, "Chart.yaml"), &meta)
		if meta.Annotations[operator.KarpenterCoreVersionAnnotation] != version || meta.KubeVersion == "" {
			t.Errorf("%s: kubeVersion %q, annotations %v; want the embedded core %s", filepath.Base(c), meta.KubeVersion, meta.Annotations, version)
		}
	}
	if crds := all[*apiextensionsv1.CustomResourceDefinition](render(t, "fulfiller")); len(crds) > 0 {
		t.Errorf("the fulfiller chart renders %d CRDs: they are the fulfiller-crd chart's", len(crds))
	}
}

// TestKubeVersion: both charts refuse a cluster older than their kubeVersion.
func TestKubeVersion(t *testing.T) {
	for _, c := range []string{chart, crdChart} {
		_, err := helmCmd(t, "template", "x", c, "--kube-version", "1.29.0")
		if err == nil || !strings.Contains(err.Error(), "incompatible with Kubernetes v1.29.0") {
			t.Errorf("%s on Kubernetes 1.29: %v", filepath.Base(c), err)
		}
		if _, err := helmCmd(t, "template", "x", c, "--kube-version", "1.36.3"); err != nil {
			t.Errorf("%s on Kubernetes 1.36.3: %v", filepath.Base(c), err)
		}
	}
}

// TestPackages checks what `helm package` makes of both charts: archives that lint and hold
// every file of the chart's folder that .helmignore does not exclude, and nothing else.
// TestInstall installs them.
func TestPackages(t *testing.T) {
	chartPackage, crdChartPackage := packaged(t)
	for _, p := range []struct{ dir, tgz string }{{chart, chartPackage}, {crdChart, crdChartPackage}} {
		name := filepath.Base(p.dir)
		if want := name + "-" + chartVersion(t, p.dir) + ".tgz"; filepath.Base(p.tgz) != want {
			t.Errorf("package %s, want %s", filepath.Base(p.tgz), want)
		}
		out, err := helmCmd(t, "lint", "--strict", p.tgz)
		if err != nil || !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint %s: %v\n%s", filepath.Base(p.tgz), err, out)
		}
		var want []string
		err = filepath.WalkDir(p.dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(p.dir, path)
			if !strings.HasSuffix(rel, ".go") {
				want = append(want, name+"/"+rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := tarFiles(t, p.tgz)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want the chart's files %v", filepath.Base(p.tgz), got, want)
		}
		for _, must := range []string{name + "/Chart.yaml", name + "/values.yaml", name + "/values.schema.json", name + "/README.md"} {
			if !slices.Contains(got, must) {
				t.Errorf("%s has no %s", filepath.Base(p.tgz), must)
			}
		}
	}
}

// TestVersions: VERSION is the one source of the version being made (CHANGELOG.md says so);
// both charts' version and appVersion equal it, so the image tag the chart defaults to is the
// binary's release, and the CHANGELOG has a section for it or an Unreleased one.
func TestVersions(t *testing.T) {
	version := projectVersion(t)
	for _, dir := range []string{chart, crdChart} {
		var meta struct {
			Version    string `json:"version"`
			AppVersion string `json:"appVersion"`
		}
		readYAML(t, filepath.Join(dir, "Chart.yaml"), &meta)
		if meta.Version != version || meta.AppVersion != version {
			t.Errorf("%s/Chart.yaml: version %q, appVersion %q; want VERSION's %q for both", filepath.Base(dir), meta.Version, meta.AppVersion, version)
		}
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(changelog, []byte("\n## [Unreleased]\n")) && !bytes.Contains(changelog, []byte("\n## ["+version+"] - ")) {
		t.Errorf("CHANGELOG.md has neither an Unreleased section nor one for %s", version)
	}
}

// projectVersion is VERSION's semantic version.
func projectVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(data))
	if v == "" {
		t.Fatal("VERSION is empty")
	}
	return v
}

func chartVersion(t *testing.T, dir string) string {
	t.Helper()
	var meta struct {
		Version string `json:"version"`
	}
	readYAML(t, filepath.Join(dir, "Chart.yaml"), &meta)
	return meta.Version
}

// tarFiles lists the regular files of a .tgz, sorted.
func tarFiles(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			files = append(files, h.Name)
		}
	}
	slices.Sort(files)
	return files
}

// normalizedJSON is v as plain JSON values, so that specs compare by value.
func normalizedJSON(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// parseFulfillerOptions parses the chart's FULFILLER_* environment as the controller does
// (internal/operator), which checks the runner pods' settings too.
func parseFulfillerOptions(t *testing.T, env map[string]corev1.EnvVar) *operator.Options {
	t.Helper()
	for name, e := range env {
		if e.ValueFrom == nil && strings.HasPrefix(name, "FULFILLER_") {
			t.Setenv(name, e.Value)
		}
	}
	opts := &operator.Options{}
	fs := &coreoptions.FlagSet{FlagSet: flag.NewFlagSet("fulfiller", flag.ContinueOnError)}
	opts.AddFlags(fs)
	if err := opts.Parse(fs); err != nil {
		t.Fatalf("the controller rejects the chart's environment: %v", err)
	}
	return opts
}

func parseKarpenterOptions(t *testing.T, env map[string]corev1.EnvVar) *coreoptions.Options {
	t.Helper()
	for name, e := range env {
		if e.ValueFrom == nil && !strings.HasPrefix(name, "FULFILLER_") {
			t.Setenv(name, e.Value)
		}
	}
	opts := &coreoptions.Options{}
	fs := &coreoptions.FlagSet{FlagSet: flag.NewFlagSet("karpenter", flag.ContinueOnError)}
	opts.AddFlags(fs)
	if err := opts.Parse(fs); err != nil {
		t.Fatalf("karpenter rejects the chart's environment: %v", err)
	}
	for _, name := range []string{"METRICS_PORT", "HEALTH_PROBE_PORT", "KUBE_CLIENT_QPS"} {
		if _, err := strconv.Atoi(envValue(t, env, name)); err != nil {
			t.Errorf("env %s: %v", name, err)
		}
	}
	return opts
}

func strictJSON(t *testing.T, data string, into any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("decoding %s into %T: %v", data, into, err)
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func avoidsManagedNodes(a *corev1.Affinity) bool {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, term := range terms { // terms are ORed: each must exclude managed nodes
		ok := false
		for _, e := range term.MatchExpressions {
			if e.Key == "karpenter.sh/nodepool" && e.Operator == corev1.NodeSelectorOpDoesNotExist {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestValuesDocumented checks that every value is in the chart README's values table, and that
// the schema knows it.
func TestValuesDocumented(t *testing.T) {
	var values map[string]any
	var schema map[string]any
	readYAML(t, filepath.Join(chart, "values.yaml"), &values)
	readYAML(t, filepath.Join(chart, "values.schema.json"), &schema)
	readme, err := os.ReadFile(filepath.Join(chart, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		if s == nil {
			t.Errorf("value %s is not in the schema", path)
			return
		}
		// A value is documented in the table as a whole, or each of its values is.
		if path != "" && bytes.Contains(readme, []byte("| `"+path+"` |")) {
			return
		}
		m, isMap := v.(map[string]any)
		if !isMap || s["additionalProperties"] != false {
			t.Errorf("value %s is not in the README's values table", path)
			return
		}
		props, _ := s["properties"].(map[string]any)
		for k, child := range m {
			sub, _ := props[k].(map[string]any)
			p := k
			if path != "" {
				p = path + "." + k
			}
			walk(p, child, sub)
		}
	}
	if schema["additionalProperties"] != false {
		t.Fatal("values.schema.json allows unknown top-level values")
	}
	walk("", values, schema)
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
}

// renamedValues are the names of chart 0.1.0 that chart 0.2.0 renamed, old → new, as
// templates/_helpers.tpl lists them (fulfiller.renamedValues).
func renamedValues(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chart, "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), `{{- define "fulfiller.renamedValues" -}}`)
	block, _, ok2 := strings.Cut(rest, "{{- end }}")
	if !ok || !ok2 {
		t.Fatal("templates/_helpers.tpl has no fulfiller.renamedValues")
	}
	var renamed map[string]string
	if err := yaml.UnmarshalStrict([]byte(block), &renamed); err != nil || len(renamed) == 0 {
		t.Fatalf("parsing fulfiller.renamedValues: %v", err)
	}
	return renamed
}

// nested is a values document that sets one dotted path.
func nested(path string, value any) map[string]any {
	keys := strings.Split(path, ".")
	doc := map[string]any{keys[len(keys)-1]: value}
	for i := len(keys) - 2; i >= 0; i-- {
		doc = map[string]any{keys[i]: doc}
	}
	return doc
}

// TestDeprecatedValues: each name of chart 0.1.0 that chart 0.2.0 renamed still works for
// one release: set to a value that changes the manifest, it renders exactly as its new name
// set to the same value does. The schema marks each as deprecated, the README lists it, and
// NOTES.txt warns about the ones set.
func TestDeprecatedValues(t *testing.T) {
	renamed := renamedValues(t)
	// A value for each old name that differs from the default, and values that make it show.
	values := map[string]struct {
		value any
		base  string
	}{
		"clusterName":                             {"other-cluster", ""},
		"image.repository":                        {"registry.example/fulfiller", ""},
		"image.tag":                               {"v9", ""},
		"image.digest":                            {"sha256:" + strings.Repeat("ab", 32), ""},
		"image.pullPolicy":                        {"Always", ""},
		"resources":                               {map[string]any{"requests": map[string]any{"cpu": "1", "memory": "1Gi"}}, ""},
		"securityContext":                         {map[string]any{"readOnlyRootFilesystem": true, "runAsNonRoot": true}, ""},
		"extraEnv":                                {[]any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}}, ""},
		"metrics.port":                            {9000, ""},
		"healthProbe.port":                        {9001, ""},
		"metrics.service.enabled":                 {false, ""},
		"metrics.service.port":                    {9100, ""},
		"metrics.service.annotations":             {map[string]any{"example.com/scrape": "true"}, ""},
		"metrics.serviceMonitor.enabled":          {true, ""},
		"metrics.serviceMonitor.additionalLabels": {map[string]any{"release": "prom"}, "serviceMonitor: {enabled: true}"},
		"metrics.serviceMonitor.endpointConfig":   {map[string]any{"scrapeTimeout": "10s"}, "serviceMonitor: {enabled: true}"},
		"metrics.serviceMonitor.interval":         {"30s", "serviceMonitor: {enabled: true}"},
	}
	var gates struct {
		Settings struct {
			FeatureGates map[string]bool `json:"featureGates"`
		} `json:"settings"`
	}
	readYAML(t, filepath.Join(chart, "values.yaml"), &gates)
	for gate, on := range gates.Settings.FeatureGates {
		old := "settings.featureGates." + strings.ToUpper(gate[:1]) + gate[1:]
		values[old] = struct {
			value any
			base  string
		}{!on, ""}
	}
	var schema map[string]any
	readYAML(t, filepath.Join(chart, "values.schema.json"), &schema)
	readme, err := os.ReadFile(filepath.Join(chart, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{} // renders without a renamed value, by base values
	for old, new := range renamed {
		t.Run(old, func(t *testing.T) {
			v, ok := values[old]
			if !ok {
				t.Fatalf("no test value for %s (renamed to %s)", old, new)
			}
			renderWith := func(doc map[string]any) string {
				args := []string{"template", "fulfiller", chart, "--namespace", "fulfiller"}
				if v.base != "" {
					base := filepath.Join(t.TempDir(), "base.yaml")
					writeFile(t, base, v.base)
					args = append(args, "-f", base)
				}
				if old == "clusterName" && doc != nil {
					// helmCmd's --set settings.clusterName, which wins over a values file, is
					// left out when the arguments name a cluster.
					for path, value := range flatten(doc) {
						args = append(args, "--set", fmt.Sprintf("%s=%v", path, value))
					}
					doc = nil
				}
				if doc != nil {
					data, err := yaml.Marshal(doc)
					if err != nil {
						t.Fatal(err)
					}
					path := filepath.Join(t.TempDir(), "values.yaml")
					writeFile(t, path, string(data))
					args = append(args, "-f", path)
				}
				out, err := helmCmd(t, args...)
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			if _, ok := defaults[v.base]; !ok {
				defaults[v.base] = renderWith(nil)
			}
			withOld, withNew := renderWith(nested(old, v.value)), renderWith(nested(new, v.value))
			if withOld == defaults[v.base] {
				t.Errorf("setting %s changes nothing: the test value shows nothing", old)
			}
			if withOld != withNew {
				t.Errorf("%s renders differently from %s:\n%s", old, new, lineDiff(withNew, withOld))
			}
			if s := schemaAt(schema, old); s == nil || s["deprecated"] != true || !strings.Contains(fmt.Sprint(s["description"]), "use "+new) {
				t.Errorf("the schema does not mark %s as deprecated for %s: %v", old, new, s)
			}
			if !bytes.Contains(readme, []byte("| `"+old+"` | `"+new+"` |")) {
				t.Errorf("README.md's deprecated values do not list %s → %s", old, new)
			}
		})
	}
	// The notes of an install name the old names set, and only those. A dry run still asks the
	// API server whether the release's objects exist already: a release name and namespace of
	// its own keep it clear of TestInstall's release (its ClusterRoles are named after it).
	notes := func(args ...string) string {
		out, err := helmCmd(t, append([]string{"install", "deprecated-values", chart, "--namespace", "deprecated-values", "--dry-run=client", "--kubeconfig", cp.Kubeconfig}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		_, n, _ := strings.Cut(out, "NOTES:")
		return n
	}
	if n := notes(); strings.Contains(n, "renamed") || !strings.Contains(n, "(Karpenter core "+testenv.GoModVersion(t, "sigs.k8s.io/karpenter")+" with") {
		t.Errorf("notes with the new names warn of renamed values or do not name the embedded core:\n%s", n)
	}
	n := notes("--set", "clusterName=old-name,metrics.port=9000,settings.featureGates.NodeRepair=true")
	for _, want := range []string{"WARNING: these values were renamed in chart 0.2.0", "- clusterName: use settings.clusterName",
		"- metrics.port: use controller.metrics.port", "- settings.featureGates.NodeRepair: use settings.featureGates.nodeRepair"} {
		if !strings.Contains(n, want) {
			t.Errorf("the notes do not say %q:\n%s", want, n)
		}
	}
	if strings.Contains(n, "- healthProbe.port") {
		t.Errorf("the notes name an old value that is not set:\n%s", n)
	}
}

// flatten is a values document's leaves by dotted path.
func flatten(doc map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range doc {
		if m, ok := v.(map[string]any); ok {
			for path, leaf := range flatten(m) {
				out[k+"."+path] = leaf
			}
			continue
		}
		out[k] = v
	}
	return out
}

// schemaAt is the schema of a dotted values path, or nil.
func schemaAt(schema map[string]any, path string) map[string]any {
	at := schema
	for _, key := range strings.Split(path, ".") {
		props, _ := at["properties"].(map[string]any)
		next, _ := props[key].(map[string]any)
		if next == nil {
			return nil
		}
		at = next
	}
	return at
}

// lineDiff is the lines of b that are not in a, and those of a not in b.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}
