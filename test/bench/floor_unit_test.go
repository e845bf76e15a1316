// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestResourceCreated reads when a run's first resource was created from tofu's stream in the
// run log, and fails for a log without one.
func TestResourceCreated(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "run.log")
	lines := `{"@level":"info","@message":"OpenTofu 1.12.6","@timestamp":"2026-12-02T00:10:00.100000Z","type":"version"}
not JSON: a line of the runner's own
{"@level":"info","@message":"terraform_data.machine: Creating...","@timestamp":"2026-12-02T00:10:01.250000Z","type":"apply_start"}
{"@level":"info","@message":"terraform_data.machine: Creation complete after 0s","@timestamp":"2026-12-02T00:10:01.312345Z","type":"apply_complete"}
{"@level":"info","@message":"second: Creation complete after 0s","@timestamp":"2026-12-02T00:10:02.000000Z","type":"apply_complete"}
`
	if err := os.WriteFile(log, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := resourceCreated(log)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 12, 2, 0, 10, 1, 312345000, time.UTC); !got.Equal(want) {
		t.Errorf("resourceCreated = %v, want %v", got, want)
	}
	if err := os.WriteFile(log, []byte(`{"@timestamp":"2026-12-02T00:10:00Z","type":"version"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := resourceCreated(log); err == nil {
		t.Errorf("a log without apply_complete gave %v, want an error", got)
	}
}
