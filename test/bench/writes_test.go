// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiWrites counts the API server's write requests (apiserver_request_total, verbs that
// change something) by resource[/subresource] and verb. The API server's metrics do not say
// who wrote, so the counts are the whole environment's: the controllers, the runs, the
// machines' kubelets and the control plane's own.
type apiWrites map[string]map[string]float64

// writeVerbs are the verbs of apiserver_request_total that change something.
var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}

// apiServerMetrics is the API server's /metrics, in the text format.
func apiServerMetrics(ctx context.Context, cfg *rest.Config) ([]byte, error) {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	body, err := c.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return body, nil
}

// readAPIWrites reads the API server's write counters.
func readAPIWrites(ctx context.Context, cfg *rest.Config) (apiWrites, error) {
	body, err := apiServerMetrics(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return parseAPIWrites(bytes.NewReader(body))
}

func parseAPIWrites(r io.Reader) (apiWrites, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	out := apiWrites{}
	fam, ok := families["apiserver_request_total"]
	if !ok {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		verb := labelOf(m, "verb")
		if !slices.Contains(writeVerbs, verb) || labelOf(m, "dry_run") != "" {
			continue
		}
		resource := labelOf(m, "resource")
		if sub := labelOf(m, "subresource"); sub != "" {
			resource += "/" + sub
		}
		if out[resource] == nil {
			out[resource] = map[string]float64{}
		}
		out[resource][verb] += m.GetCounter().GetValue()
	}
	return out, nil
}

// minus is what w counted since before.
func (w apiWrites) minus(before apiWrites) apiWrites {
	out := apiWrites{}
	for resource, verbs := range w {
		for verb, n := range verbs {
			if d := n - before[resource][verb]; d > 0 {
				if out[resource] == nil {
					out[resource] = map[string]float64{}
				}
				out[resource][verb] = d
			}
		}
	}
	return out
}

// total counts every write, and apart those to leases: the kubelets' heartbeats (one lease
// renewal each 10 s per node) and the controllers' leader elections, which scale with time,
// not with claims.
func (w apiWrites) total() (all, leases float64) {
	for resource, verbs := range w {
		for _, n := range verbs {
			all += n
			if resource == "leases" {
				leases += n
			}
		}
	}
	return all, leases
}

// writesTable is a Markdown table of the writes per claim of each environment by resource and
// verb, rows sorted by resource.
func writesTable(claims int, envs []string, writes []apiWrites) string {
	rows := map[string]bool{}
	for _, w := range writes {
		for resource, verbs := range w {
			for verb := range verbs {
				rows[resource+" "+verb] = true
			}
		}
	}
	var b strings.Builder
	b.WriteString("| resource | verb |")
	for _, e := range envs {
		fmt.Fprintf(&b, " %s |", e)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(envs)) + "\n")
	for _, row := range slices.Sorted(maps.Keys(rows)) {
		resource, verb, _ := strings.Cut(row, " ")
		fmt.Fprintf(&b, "| %s | %s |", resource, verb)
		for _, w := range writes {
			fmt.Fprintf(&b, " %.1f |", w[resource][verb]/float64(claims))
		}
		b.WriteString("\n")
	}
	b.WriteString("| **all but leases** | |")
	for _, w := range writes {
		all, leases := w.total()
		fmt.Fprintf(&b, " **%.1f** |", (all-leases)/float64(claims))
	}
	b.WriteString("\n")
	return b.String()
}
