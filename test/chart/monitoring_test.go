// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// prometheusOperator is the prometheus-operator release whose CRDs the monitoring test
// installs, from its Go module (example/prometheus-operator-crd), through the module proxy.
const prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// promQuery is what hack/promql prints for each expression it finds.
type promQuery struct {
	Source  string   `json:"source"`
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics"`
	Error   string   `json:"error"`
}

// parseQueries runs hack/promql, Prometheus's own PromQL parser, over rendered manifests.
func parseQueries(t *testing.T, manifests string) []promQuery {
	t.Helper()
	cmd := exec.Command("go", "-C", filepath.Join(root, "hack", "promql"), "run", ".", "-")
	cmd.Stdin = strings.NewReader(manifests)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/promql: %v\n%s", err, stderr.String())
	}
	var queries []promQuery
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var q promQuery
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			t.Fatalf("hack/promql printed %q: %v", sc.Text(), err)
		}
		queries = append(queries, q)
	}
	return queries
}

// documentedMetrics are the metric names docs/metrics.md's tables name in their first
// column: the metrics the controller exports.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile("`([a-z_]+)`")
	names := map[string]bool{}
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			names[m[1]] = true
		}
	}
	if !names["fulfiller_runs_total"] || !names["operator_tofunodeclass_status_condition_count"] {
		t.Fatalf("docs/metrics.md's tables name %d metrics, not the runs' counter or the class conditions'", len(names))
	}
	return names
}

// unknownMetrics are the names q selects that docs/metrics.md does not name; a histogram's
// _bucket, _sum and _count series count as the histogram.
func unknownMetrics(q promQuery, documented map[string]bool) []string {
	var unknown []string
	for _, m := range q.Metrics {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && documented[b] {
				base = b
			}
		}
		if !documented[base] {
			unknown = append(unknown, m)
		}
	}
	return unknown
}

// runbookAnchors are the anchors of docs/runbooks.md's sections, as GitHub makes them.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	anchors := map[string]bool{}
	for line := range strings.Lines(string(data)) {
		if heading, ok := strings.CutPrefix(line, "## "); ok {
			anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), ""), " ", "-")] = true
		}
	}
	return anchors
}

// TestAlertsAndDashboard: with prometheusRule and dashboard on, the chart renders a
// PrometheusRule whose every alert has a severity, the extra alert labels and a runbook_url
// naming a section of docs/runbooks.md, and a dashboard ConfigMap for Grafana's sidecar.
// Every alert expression and dashboard query parses with Prometheus's parser and selects only
// metrics docs/metrics.md names. The packaged chart installs with both (and the
// ServiceMonitor) into the API server, with prometheus-operator's own CRDs.
func TestAlertsAndDashboard(t *testing.T) {
	args := []string{"--set", "prometheusRule.enabled=true", "--set", "dashboard.enabled=true",
		"--set", "prometheusRule.alertLabels.team=platform", "--set", "prometheusRule.runbookURL=https://docs.example/runbooks"}
	out, err := helmCmd(t, append([]string{"template", "fulfiller", chart, "--namespace", "monitoring"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	rule := find[*unstructured.Unstructured](t, m, "fulfiller")
	if rule.GetKind() != "PrometheusRule" {
		t.Fatalf("object fulfiller is a %s", rule.GetKind())
	}
	anchors := runbookAnchors(t)
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	alerts := 0
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			r := r.(map[string]any)
			alerts++
			name, _ := r["alert"].(string)
			labels, _, _ := unstructured.NestedStringMap(r, "labels")
			if labels["severity"] == "" || labels["team"] != "platform" {
				t.Errorf("alert %s has labels %v", name, labels)
			}
			annotations, _, _ := unstructured.NestedStringMap(r, "annotations")
			anchor, ok := strings.CutPrefix(annotations["runbook_url"], "https://docs.example/runbooks#")
			if !ok || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q names no section of docs/runbooks.md", name, annotations["runbook_url"])
			}
			if annotations["summary"] == "" || annotations["description"] == "" {
				t.Errorf("alert %s has no summary or description: %v", name, annotations)
			}
		}
	}
	dash := find[*corev1.ConfigMap](t, m, "fulfiller-dashboard")
	var board struct{ Panels []any }
	if dash.Labels["grafana_dashboard"] != "1" || json.Unmarshal([]byte(dash.Data["fulfiller.json"]), &board) != nil || len(board.Panels) == 0 {
		t.Errorf("dashboard ConfigMap labels %v, data %.200q", dash.Labels, dash.Data["fulfiller.json"])
	}

	documented := documentedMetrics(t)
	queries := parseQueries(t, out)
	var fromRules, fromDashboard int
	for _, q := range queries {
		switch {
		case strings.HasPrefix(q.Source, "PrometheusRule"):
			fromRules++
		case strings.HasPrefix(q.Source, "ConfigMap"):
			fromDashboard++
		}
		if q.Error != "" {
			t.Errorf("%s: %s does not parse: %s", q.Source, q.Expr, q.Error)
		} else if len(q.Metrics) == 0 {
			t.Errorf("%s: %s selects no metric", q.Source, q.Expr)
		} else if unknown := unknownMetrics(q, documented); len(unknown) > 0 {
			t.Errorf("%s: %s selects metrics the controller does not export (docs/metrics.md): %v", q.Source, q.Expr, unknown)
		}
	}
	if fromRules != alerts || alerts < 10 || fromDashboard < 15 {
		t.Errorf("parsed %d rule expressions of %d alerts and %d dashboard queries", fromRules, alerts, fromDashboard)
	}
	t.Logf("%d alerts and %d dashboard queries parse and select documented metrics", alerts, fromDashboard)

	// The check fails where it should: an expression that does not parse, one that names a
	// metric nobody exports.
	broken := `apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: broken}
spec:
  groups:
    - name: broken
      rules:
        - {alert: Unbalanced, expr: 'sum(rate(fulfiller_runs_total[5m])'}
        - {alert: Unknown, expr: 'rate(fulfiller_runs_totals[5m]) > 0'}
`
	got := parseQueries(t, broken)
	if len(got) != 2 || got[0].Error == "" || got[1].Error != "" || !slices.Equal(unknownMetrics(got[1], documented), []string{"fulfiller_runs_totals"}) {
		t.Errorf("the broken rules were read as %+v", got)
	}

	t.Run("Install", func(t *testing.T) {
		ctx := ctxFor(t, 5*time.Minute)
		dl, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", prometheusOperator).Output()
		if err != nil {
			t.Fatalf("go mod download %s: %v", prometheusOperator, err)
		}
		var mod struct{ Dir string }
		if err := json.Unmarshal(dl, &mod); err != nil || mod.Dir == "" {
			t.Fatalf("go mod download %s printed %s: %v", prometheusOperator, dl, err)
		}
		crds := filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
		for _, f := range []string{"monitoring.coreos.com_prometheusrules.yaml", "monitoring.coreos.com_servicemonitors.yaml"} {
			if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "--server-side", "-f", filepath.Join(crds, f)).CombinedOutput(); err != nil {
				t.Fatalf("kubectl apply of %s: %v\n%s", f, err, out)
			}
		}
		ext := apiextensionsclient.NewForConfigOrDie(cp.Config)
		waitEstablished(ctx, t, ext, "prometheusrules.monitoring.coreos.com")
		waitEstablished(ctx, t, ext, "servicemonitors.monitoring.coreos.com")
		chartPackage, _ := packaged(t)
		if out, err := helmCmd(t, append([]string{"install", "monitoring", chartPackage, "--kubeconfig", cp.Kubeconfig, "--namespace", "monitoring",
			"--create-namespace", "--set", "serviceMonitor.enabled=true"}, args...)...); err != nil {
			t.Fatalf("installing the chart with its PrometheusRule, dashboard and ServiceMonitor: %v\n%s", err, out)
		}
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.Kubeconfig, "-n", "monitoring", "get", "prometheusrules,servicemonitors,configmaps", "-o", "name").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get: %v\n%s", err, out)
		}
		for _, want := range []string{"prometheusrule.monitoring.coreos.com/monitoring-fulfiller", "servicemonitor.monitoring.coreos.com/monitoring-fulfiller", "configmap/monitoring-fulfiller-dashboard"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("after the install, %s is missing:\n%s", want, out)
			}
		}
		if out, err := helmCmd(t, "uninstall", "monitoring", "--kubeconfig", cp.Kubeconfig, "--namespace", "monitoring", "--wait"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
}
