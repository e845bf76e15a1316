// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLastProgress(t *testing.T) {
	path := filepath.Join(t.TempDir(), LogFileName)
	log := `{"@level":"info","@message":"fulfiller: apply of run r started","@module":"fulfiller","type":"log"}
{"@level":"info","@message":"terraform_data.machine: Creating...","@module":"tofu.ui","type":"apply_start"}
{"@level":"info","@message":"terraform_data.machine: Provisioning with 'local-exec'...","@module":"tofu.ui","type":"provision_start"}
{"@level":"info","@message":"a note","@module":"fulfiller","type":"log"}
{"@level":"info","@message":"half a li`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := lastProgress(path), "terraform_data.machine: Provisioning with 'local-exec'..."; got != want {
		t.Errorf("lastProgress = %q, want %q", got, want)
	}
	if got := lastProgress(filepath.Join(t.TempDir(), "missing")); got != "" {
		t.Errorf("lastProgress of a missing log = %q", got)
	}
}
