// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package simulated

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestModuleDestroysAFailedPowerOn: a machine whose power-on fails (here one of an
// architecture simulated machines do not have, which the module passes on unchecked) leaves a tainted resource in the state, as an interrupted power-on does when
// its claim is deleted mid-apply. tofu skips a tainted resource's destroy-time provisioners,
// so modules/sim deletes the machine from a resource of its own: the destroy removes the state
// dir, with the user data the power-on wrote there, as a cloud deletes a server whose
// creation failed.
func TestModuleDestroysAFailedPowerOn(t *testing.T) {
	simDir, state := t.TempDir(), filepath.Join(t.TempDir(), "state.tfstate")
	const name = "claim-failed-power-on"
	req := simRequest(t, name, state, nil, map[string]string{"sim_dir": simDir, "arch": "riscv64"})
	var log testenv.SyncBuffer
	if res := tfrunner.Run(context.Background(), req, &log, nil); res.Succeeded {
		t.Fatalf("apply of a riscv64 machine succeeded:\n%s", log.String())
	}
	machineDir := filepath.Join(simDir, name)
	if _, err := os.Stat(filepath.Join(machineDir, "user-data")); err != nil {
		t.Fatalf("the failed power-on wrote no user data (%v), so this test shows nothing:\n%s", err, log.String())
	}
	saved, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(saved), `"status": "tainted"`) {
		t.Fatalf("the failed power-on left no tainted resource in the state:\n%s", saved)
	}

	req.Name, req.Operation, req.WorkDir = name+"-destroy-1", tfrunner.Destroy, t.TempDir()
	if res := tfrunner.Run(context.Background(), req, &log, nil); !res.Succeeded {
		t.Fatalf("destroy: %v\n%s", res.Error, log.String())
	}
	if _, err := os.Stat(machineDir); !os.IsNotExist(err) {
		t.Errorf("the machine's state dir after destroy: %v", err)
	}
}

// simRequest is an apply of modules/sim for claim name with a local state file, whose machine
// is this test binary (TestMain).
func simRequest(t *testing.T, name, state string, labels, params map[string]string) tfrunner.Request {
	t.Helper()
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	module, err := filepath.Abs(filepath.Join("..", "..", "..", "modules", "sim"))
	if err != nil {
		t.Fatal(err)
	}
	if labels == nil {
		labels = map[string]string{}
	}
	return tfrunner.Request{
		Name: name + "-apply-1", Operation: tfrunner.Apply, Family: v1alpha1.FamilySim, ModuleDir: module, WorkDir: t.TempDir(),
		Backend: tfrunner.Backend{Type: "local", Config: map[string]string{"path": state}},
		Variables: map[string]any{
			tfrunner.VarNodeName: name, tfrunner.VarNodeType: "sim-small", tfrunner.VarZone: "sim-1", tfrunner.VarUserData: "#cloud-config\n",
			tfrunner.VarLabels: labels, tfrunner.VarParameters: params,
		},
		TofuPath: tofu,
	}
}
