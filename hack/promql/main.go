// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Command promql reads the chart's rendered manifests (a YAML stream, `helm template`'s
// output) and parses every PromQL expression in them with Prometheus's own parser: each
// PrometheusRule's rule expressions and each Grafana dashboard's queries (a ConfigMap value
// that is a dashboard's JSON). It prints one JSON object per expression: where it is, the
// expression, the metric names it selects, and the parse error if any. It is a module of its
// own, like hack/image, so that Prometheus's dependencies stay out of the fulfiller's.
//
//	helm template ... | go -C hack/promql run . -
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
)

// Query is one expression found in the manifests.
type Query struct {
	Source  string   `json:"source"`
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics"`
	Error   string   `json:"error,omitempty"`
}

func main() {
	in := io.Reader(os.Stdin)
	if len(os.Args) > 1 && os.Args[1] != "-" {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		in = f
	}
	queries, err := extract(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, q := range queries {
		if err := enc.Encode(q); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
}

type manifest struct {
	Kind     string                `yaml:"kind"`
	Metadata struct{ Name string } `yaml:"metadata"`
	Data     map[string]string     `yaml:"data"`
	Spec     struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	} `yaml:"spec"`
}

type dashboard struct {
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func extract(in io.Reader) ([]Query, error) {
	var out []Query
	dec := yaml.NewDecoder(in)
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the manifests: %w", err)
		}
		switch m.Kind {
		case "PrometheusRule":
			for _, g := range m.Spec.Groups {
				for _, r := range g.Rules {
					name := r.Alert + r.Record
					out = append(out, check(fmt.Sprintf("PrometheusRule %s, group %s, rule %s", m.Metadata.Name, g.Name, name), r.Expr))
				}
			}
		case "ConfigMap":
			for key, value := range m.Data {
				var d dashboard
				if json.Unmarshal([]byte(value), &d) != nil || len(d.Panels) == 0 {
					continue
				}
				src := fmt.Sprintf("ConfigMap %s, dashboard %s (%s)", m.Metadata.Name, d.Title, key)
				out = append(out, dashboardQueries(src, d)...)
			}
		}
	}
}

// labelValues is Grafana's template variable query label_values(<selector>, <label>).
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

func dashboardQueries(src string, d dashboard) []Query {
	var out []Query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		expr := q
		if sub := labelValues.FindStringSubmatch(q); sub != nil {
			expr = sub[1]
		}
		out = append(out, check(src+", variable "+v.Name, expr))
	}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, check(src+", panel "+p.Title, t.Expr))
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaRanges are Grafana's range variables, which a query may use where PromQL takes a
// duration; they are given a duration for parsing.
var grafanaRanges = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// check parses expr with the parser's defaults (no experimental functions: what a
// Prometheus without feature flags accepts) and names the metrics it selects.
func check(src, expr string) Query {
	q := Query{Source: src, Expr: expr, Metrics: []string{}}
	if strings.TrimSpace(expr) == "" {
		q.Error = "empty expression"
		return q
	}
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaRanges.Replace(expr))
	if err != nil {
		q.Error = err.Error()
		return q
	}
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			q.Error = "a selector without a metric name: " + vs.String()
		} else if !slices.Contains(q.Metrics, name) {
			q.Metrics = append(q.Metrics, name)
		}
		return nil
	})
	slices.Sort(q.Metrics)
	return q
}
