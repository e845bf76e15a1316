// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"strings"
	"testing"
)

// A missing PostgreSQL is an error that says how to install it, never a skip.
func TestStartPostgresWithoutBinaries(t *testing.T) {
	t.Setenv(PostgresBinEnv, t.TempDir())
	pg, err := StartPostgres(context.Background())
	if err == nil {
		_ = pg.Stop()
		t.Fatal("started without postgresql binaries")
	}
	if !strings.Contains(err.Error(), "apt-get install -y --no-install-recommends postgresql") {
		t.Errorf("error does not say how to install postgresql: %v", err)
	}
}
