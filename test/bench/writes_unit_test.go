// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"strings"
	"testing"
)

func TestAPIWrites(t *testing.T) {
	scrape := func(pods, status, leases, gets string) apiWrites {
		t.Helper()
		text := `# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} ` + pods + `
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="fulfiller.sh",resource="fulfillments",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} ` + status + `
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} ` + leases + `
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} ` + gets + `
`
		w, err := parseAPIWrites(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	before, after := scrape("3", "1", "10", "50"), scrape("13", "31", "30", "500")
	d := after.minus(before)
	if d["pods"]["POST"] != 10 || d["fulfillments/status"]["PATCH"] != 30 || d["leases"]["PUT"] != 20 || len(d["pods"]) != 1 {
		t.Fatalf("writes since before = %v; want pods POST 10 (no dry run, no GET), fulfillments/status PATCH 30, leases PUT 20", d)
	}
	if all, leases := d.total(); all != 60 || leases != 20 {
		t.Errorf("total = %v, %v; want 60, 20", all, leases)
	}
	table := writesTable(10, []string{"fulfiller", "kwok"}, []apiWrites{d, before})
	for _, want := range []string{"| fulfillments/status | PATCH | 3.0 | 0.1 |", "| pods | POST | 1.0 | 0.3 |", "| **all but leases** | | **4.0** | **0.4** |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
