// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// A generic module's class rules classify its failures: a code or a pattern of its provider's
// error gives the class the generic rules would not.
func TestRunClassErrorRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		rules []ErrorRule
		want  ErrorClass
	}{
		{"no rules", nil, Unknown},
		{"a code", []ErrorRule{{Code: "placement_failed", Class: Quota}, {Code: "sold_out", Class: Capacity}}, Capacity},
		{"a pattern", []ErrorRule{{Pattern: `no (capacity|hosts) left in zone \w+`, Class: Capacity}}, Capacity},
		{"no match", []ErrorRule{{Code: "other_code", Class: Capacity}}, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := nodeRequest(t, "node-rules", "node", filepath.Join(t.TempDir(), "state.tfstate"),
				map[string]string{"fail_with": "error: sold_out: no capacity left in zone sim-1"})
			req.Family, req.ErrorRules = "", tc.rules
			res := Run(context.Background(), req, io.Discard, testRules)
			if res.Succeeded || res.Error == nil || res.Error.Class != tc.want || !strings.Contains(res.Error.Message, "sold_out") {
				t.Errorf("error %+v, want class %s naming sold_out", res.Error, tc.want)
			}
		})
	}
}

func TestCompileErrorRules(t *testing.T) {
	for _, bad := range [][]ErrorRule{
		{{Class: Capacity}},
		{{Code: "x", Pattern: "y", Class: Capacity}},
		{{Pattern: "(", Class: Capacity}},
		{{Code: "x", Class: "Cancelled"}},
	} {
		if _, err := CompileErrorRules(bad); err == nil {
			t.Errorf("rules %+v compiled", bad)
		}
	}
	req := Request{Name: "x", Operation: Apply, ModuleDir: "/m", WorkDir: "/w", TofuPath: "tofu", Family: "hcloud",
		ErrorRules: []ErrorRule{{Code: "x", Class: Capacity}}}
	if err := req.Validate(); err == nil {
		t.Error("a request with a family and error rules is valid")
	}
}
