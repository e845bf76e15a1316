// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package simulated

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestMain makes this test binary act as `fulfiller-dev sim` when modules/sim (through the
// runner's FULFILLER_BINARY, the runner's own executable) or the family's Delete starts it
// with "sim" as its first argument, which `go test` never passes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "sim" {
		os.Exit(sim.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// TestInventory applies modules/sim with the fulfiller's labels (a real tofu run that starts a
// simulated machine), lists it by this cluster's name with its claim and class, never lists a
// machine of another cluster or one without labels, and deletes it: the machine stops and its
// state dir is gone.
func TestInventory(t *testing.T) {
	simDir := t.TempDir()
	const name = "claim-a"
	req := simRequest(t, name, filepath.Join(t.TempDir(), "state.tfstate"),
		map[string]string{keys.LabelCluster: "prod-eu", keys.LabelNodeClaim: name, keys.LabelNodeClass: "sim", keys.LabelNodePool: "default"},
		map[string]string{"sim_dir": simDir, "never_join": "true"})
	var log testenv.SyncBuffer
	if res := tfrunner.Run(context.Background(), req, &log, nil); !res.Succeeded {
		t.Fatalf("apply: %v\n%s", res.Error, log.String())
	}
	stateDir := filepath.Join(simDir, name)
	t.Cleanup(func() { _ = sim.Stop(stateDir, time.Second) })
	if _, running := sim.Running(stateDir); !running {
		t.Fatalf("no machine runs after the apply\n%s", log.String())
	}
	// Another cluster's machine, and a folder without labels.
	for dir, labels := range map[string]string{"other": `{"fulfiller.sh/cluster":"staging","karpenter.sh/nodeclaim":"other"}`, "bare": ""} {
		if err := os.MkdirAll(filepath.Join(simDir, dir), 0o700); err != nil {
			t.Fatal(err)
		}
		if labels != "" {
			if err := os.WriteFile(filepath.Join(simDir, dir, LabelsFile), []byte(labels), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}

	f := NewFamily()
	scope := family.Scope{Class: &v1alpha1.TofuNodeClass{Spec: v1alpha1.TofuNodeClassSpec{Variables: map[string]string{"sim_dir": simDir}}}, Cluster: "prod-eu"}
	machines, err := f.List(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	if len(machines) != 1 {
		t.Fatalf("listed %+v, want the one machine of this cluster", machines)
	}
	m := machines[0]
	if m.ID != name || m.Claim != name || m.Class != "sim" || m.NodePool != "default" || m.Cluster != "prod-eu" || time.Since(m.Created) > 5*time.Minute {
		t.Errorf("machine %+v", m)
	}
	if err := f.Delete(context.Background(), scope, m); err != nil {
		t.Fatal(err)
	}
	if _, running := sim.Running(stateDir); running {
		t.Error("the machine runs after Delete")
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("its state dir is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(simDir, "other", LabelsFile)); err != nil {
		t.Errorf("another cluster's machine was touched: %v", err)
	}
	// A listed machine relabelled meanwhile is not deleted.
	other := family.Machine{ID: "other", Name: "other", Cluster: "prod-eu", Claim: "other"}
	if err := f.Delete(context.Background(), scope, other); err == nil {
		t.Error("a machine labelled as another cluster's was deleted")
	}
}
