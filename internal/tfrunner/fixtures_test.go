package tfrunner

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

var update = flag.Bool("update", false, "capture testdata/diagnostics/*.jsonl again from the pinned tofu")

// fixtureDir holds real tofu `-json` error diagnostics, one file per provoked failure, that
// TestClassifyFixtures classifies.
const fixtureDir = "testdata/diagnostics"

// simulatedAPIErrors are what the simulated API prints before failing, in the two shapes
// real tools print Hetzner Cloud API errors: "code: message" (hcloud CLI) and
// "message (code, correlation id)" (terraform-provider-hcloud).
var simulatedAPIErrors = map[string]string{
	"resource-unavailable": "resource_unavailable: server type cx22 unavailable in fsn1",
	"placement-error":      "error during placement (placement_error, 5c2d1bcf0a7b3e41)",
	"server-limit":         "server limit exceeded: please contact support (server_limit_exceeded, 91ad7c2e3f4b5d60)",
	"resource-limit":       "project limit of 10 primary IPs reached (resource_limit_exceeded, 0b1c2d3e4f506172)",
	"unauthorized":         "unable to authenticate (unauthorized, 7d8e9fa0b1c2d3e4)",
	"forbidden":            "insufficient permissions for this request (forbidden, 1a2b3c4d5e6f7081)",
	"rate-limit":           "limit of 3600 requests per hour reached (rate_limit_exceeded, 2b3c4d5e6f708192)",
	"action-locked":        "server is locked by another action (locked, 3c4d5e6f708192a3)",
	"api-timeout":          "Post \"https://api.hetzner.cloud/v1/servers\": dial tcp 213.239.246.1:443: i/o timeout",
	"service-unavailable":  "unexpected response 503 Service Unavailable",
	"unexplained":          "something went wrong",
}

// TestCaptureFixtures provokes each failure against the pinned tofu and saves the error
// diagnostics it printed. Run with -update after changing tofu's version.
func TestCaptureFixtures(t *testing.T) {
	if !*update {
		t.Skip("run with -update to capture the fixtures again")
	}
	if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
		t.Fatal(err)
	}
	save := func(name, log string) {
		var lines []string
		for _, line := range strings.Split(log, "\n") {
			if d, ok := parseDiagnostic([]byte(line)); ok && d.Severity == "error" {
				lines = append(lines, line)
			}
		}
		if len(lines) == 0 {
			t.Errorf("%s: no error diagnostics in\n%s", name, log)
			return
		}
		if err := os.WriteFile(filepath.Join(fixtureDir, name+".jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, req Request) {
		var log testenv.SyncBuffer
		Run(context.Background(), req, &log)
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
	go func() { Run(ctx, holder, &holderLog); close(done) }()
	eventually(t, 30e9, "the holder to provision", func() bool { return provisioning(holderLog.String()) })
	run("state-locked", nodeRequest(t, "node-x", "node", shared, nil))
	cancel()
	<-done
}
