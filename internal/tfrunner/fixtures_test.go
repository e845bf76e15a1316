// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build capture

// Capturing the fixtures: go test -tags capture -run TestCaptureFixtures ./internal/tfrunner/

package tfrunner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// TestCaptureFixtures provokes each failure against the pinned tofu and saves the error
// diagnostics it printed. Run it (with -tags capture) after changing tofu's version.
func TestCaptureFixtures(t *testing.T) {
	if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The simulated Hetzner Cloud API errors are the hcloud family's fixtures.
	hcloudFixtures := filepath.Join("..", "providers", "hcloud", "testdata", "diagnostics")
	save := func(name, log string) {
		var lines []string
		for _, line := range strings.Split(log, "\n") {
			if d, ok := ParseDiagnostic([]byte(line)); ok && d.Severity == "error" {
				lines = append(lines, line)
			}
		}
		if len(lines) == 0 {
			t.Errorf("%s: no error diagnostics in\n%s", name, log)
			return
		}
		dir := fixtureDir
		if strings.HasPrefix(name, "local-exec-") {
			dir = hcloudFixtures
		}
		if err := os.WriteFile(filepath.Join(dir, name+".jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, req Request) {
		var log testenv.SyncBuffer
		Run(context.Background(), req, &log, nil)
		save(name, log.String())
	}
	state := func() string { return filepath.Join(t.TempDir(), "state.tfstate") }

	for name, msg := range simulatedAPIErrors {
		run("local-exec-"+name, nodeRequest(t, "node-x", "node", state(), map[string]string{"fail_with": msg}))
	}
	for _, module := range []string{"undeclared-reference", "unsupported-argument"} {
		run(module, nodeRequest(t, "node-x", module, state(), nil))
	}
	req := nodeRequest(t, "node-x", "required-zone", state(), nil)
	delete(req.Variables, VarZone)
	run("required-variable", req)
	req = nodeRequest(t, "node-x", "invalid-value", state(), nil)
	req.Variables[VarNodeName] = "a-rather-long-node-name"
	run("invalid-value", req)

	// Run stops at a syntax error before tofu sees it; capture what tofu init says.
	work := t.TempDir()
	if err := copyTree(moduleDir(t, "syntax-error"), work); err != nil {
		t.Fatal(err)
	}
	tf, err := tfexec.NewTerraform(work, tofuPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.SyncBuffer
	_ = tf.InitJSON(context.Background(), &log)
	save("syntax-error", log.String())

	// The state lock: one apply sits in its provisioner while another starts.
	shared := state()
	ctx, cancel := context.WithCancel(context.Background())
	holder := nodeRequest(t, "node-x", "node", shared, map[string]string{"sleep_seconds": "30"})
	var holderLog testenv.SyncBuffer
	done := make(chan struct{})
	go func() { Run(ctx, holder, &holderLog, nil); close(done) }()
	testenv.Eventually(t, 30e9, "the holder to provision", func() bool { return provisioning(holderLog.String()) })
	run("state-locked", nodeRequest(t, "node-x", "node", shared, nil))
	cancel()
	<-done
}
