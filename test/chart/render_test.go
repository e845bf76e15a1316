// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
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
	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/yaml"
)

func TestLintStrict(t *testing.T) {
	overrides := filepath.Join(t.TempDir(), "overrides.yaml")
	writeFile(t, overrides, `
replicas: 1
runner:
  image: {repository: registry.example/fulfiller-runner, tag: v9}
  nodeSelector: {node-role.kubernetes.io/infra: ""}
  tolerations: [{key: infra, operator: Exists, effect: NoSchedule}]
stateEncryption: {create: false, existingSecret: my-passphrase}
metrics:
  serviceMonitor: {enabled: true, interval: 30s}
settings:
  ignoreDRARequests: false
  featureGates: {NodeRepair: true}
`)
	for _, args := range [][]string{nil, {"-f", overrides}} {
		out, err := helmCmd(t, append([]string{"lint", "--strict", chart, "--namespace", "fulfiller"}, args...)...)
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
	}
	for name, value := range want {
		if got := envValue(t, env, name); got != value {
			t.Errorf("env %s = %q, want %q", name, got, value)
		}
	}
	if c.Image != "ghcr.io/fulfiller-sh/fulfiller:0.1.0" {
		t.Errorf("image %q, want the chart's appVersion as tag", c.Image)
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
image: {repository: registry.example/fulfiller, digest: "sha256:`+strings.Repeat("ab", 32)+`"}
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
leaderElection: {enabled: false}
replicas: 1
stateEncryption: {create: false, existingSecret: my-passphrase}
stateNamespace: {name: tofu-states, create: false}
metrics:
  serviceMonitor: {enabled: true, interval: 30s, additionalLabels: {release: prom}}
settings:
  ignoreDRARequests: false
  featureGates: {NodeRepair: true, SpotToSpotConsolidation: true}
`)
	m := render(t, "tofu", "-f", values)
	_, c, env := controller(t, m)
	if c.Image != "registry.example/fulfiller@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image %q, want the digest", c.Image)
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
	core := find[*rbacv1.ClusterRole](t, m, "fulfiller-karpenter-core")
	if !grants(core.Rules, "resource.k8s.io", "resourceslices", "list") {
		t.Error("no DRA rules although settings.ignoreDRARequests is false")
	}
	if pdbs := all[*policyv1.PodDisruptionBudget](m); len(pdbs) != 1 {
		t.Errorf("%d PodDisruptionBudgets", len(pdbs))
	}
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
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"metrics.port=70000", "/metrics/port"},
		{"settings.preferencePolicy=Maybe", "/settings/preferencePolicy"},
		{"leaderElection.enabled=yes", "/leaderElection/enabled"},
		{"clusterName=prod eu", "/clusterName"},
		{"orphanGracePeriod=ten", "/orphanGracePeriod"},
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
	if _, err := helmCmd(t, "template", "fulfiller", chart, "--set", "clusterName="); err == nil || !strings.Contains(err.Error(), "clusterName is required") {
		t.Fatalf("no cluster name: %v", err)
	}
	_, err := helmCmd(t, "template", "fulfiller", chart, "--set", "stateEncryption.existingSecret=mine")
	if err == nil || !strings.Contains(err.Error(), "set either create or existingSecret") {
		t.Fatalf("create and existingSecret together: %v", err)
	}
	_, err = helmCmd(t, "template", "fulfiller", chart, "--set", "metrics.serviceMonitor.enabled=true,metrics.service.enabled=false")
	if err == nil || !strings.Contains(err.Error(), "needs metrics.service.enabled") {
		t.Fatalf("ServiceMonitor without Service: %v", err)
	}
}

// TestCRDsInSync checks that the chart carries exactly the generated CRDs (make chart-crds).
func TestCRDsInSync(t *testing.T) {
	generated, err := filepath.Glob(filepath.Join(root, "api", "crds", "*.yaml"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("no generated CRDs in api/crds: %v", err)
	}
	inChart, err := filepath.Glob(filepath.Join(chart, "crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	names := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if !slices.Equal(names(generated), names(inChart)) {
		t.Fatalf("chart CRDs %v differ from api/crds %v: run make generate", names(inChart), names(generated))
	}
	for _, p := range generated {
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join(chart, "crds", filepath.Base(p)))
		if !bytes.Equal(a, b) {
			t.Errorf("charts/fulfiller/crds/%s differs from api/crds: run make generate", filepath.Base(p))
		}
	}
	m := render(t, "fulfiller")
	var crdNames []string
	for _, crd := range all[*apiextensionsv1.CustomResourceDefinition](m) {
		crdNames = append(crdNames, crd.Name)
	}
	slices.Sort(crdNames)
	if !slices.Equal(crdNames, []string{"fulfillments.fulfiller.sh", "tofunodeclasses.fulfiller.sh"}) {
		t.Errorf("rendered CRDs %v: the chart carries the fulfiller's CRDs only (Karpenter's are a prerequisite)", crdNames)
	}
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
