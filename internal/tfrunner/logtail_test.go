// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"os"
	"strings"
	"testing"
)

func TestRenderLog(t *testing.T) {
	diag, err := os.ReadFile("testdata/diagnostics/invalid-value.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	log := `{"@level":"info","@message":"terraform_data.machine: Creating...","@module":"tofu.ui","@timestamp":"2026-11-30T11:58:35.5Z","type":"apply_start"}` + "\n" +
		"not json at all\n\n" + string(diag)
	want := "11:58:35Z info terraform_data.machine: Creating...\n" +
		"not json at all\n" +
		"11:58:36Z error Error: Invalid value for variable\n" +
		"    The node name must have at most 8 characters.\n" +
		"    This was checked by the validation rule at main.tf:4,3-13.\n"
	if got := RenderLog([]byte(log)); got != want {
		t.Errorf("RenderLog:\n%s\nwant:\n%s", got, want)
	}
	long := RenderLog([]byte(`{"@level":"error","@message":"` + strings.Repeat("é", 2000) + `"}`))
	if len(long) > maxRenderedLine+1 || !strings.HasSuffix(long, "…\n") {
		t.Errorf("a long message renders as %d bytes, want at most %d, cut with an ellipsis", len(long), maxRenderedLine+1)
	}
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		text string
		max  int
		want string
	}{
		{"a\nb\n", 100, "a\nb"},
		{"first line of many\nsecond\nthird\nfourth", 36, "(earlier lines left out)\nfourth"},
		{"first line of many\nsecond\nthird\nfourth", 38, "first line of many\nsecond\nthird\nfourth"},
		{"first line of many\nsecond\nthird\nfourth!", 38, "(earlier lines left out)\nthird\nfourth!"},
		{"one\n" + strings.Repeat("x", 40), 30, "(earlier lines left out)\n…" + strings.Repeat("x", 2)},
		{strings.Repeat("x", 40), 10, ""},
	} {
		got := Tail(tc.text, tc.max)
		if got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.text, tc.max, got, tc.want)
		}
		if len(got) > tc.max {
			t.Errorf("Tail(%q, %d) is %d bytes", tc.text, tc.max, len(got))
		}
	}
}
