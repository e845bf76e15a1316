// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// updateFixturesEnv rewrites the golden fixtures of TestHcloudProviderDiagnostics from the
// runs instead of comparing them.
const updateFixturesEnv = "FULFILLER_UPDATE_FIXTURES"

// fixtureDir holds the error diagnostics of Hetzner Cloud failures: hcloud-* from the real
// provider against the stand-in (TestHcloudProviderDiagnostics), local-exec-* from a module
// that prints the API's errors as the hcloud CLI and the provider do (captured by
// internal/tfrunner's fixtures_test.go).
const fixtureDir = "testdata/diagnostics"

// testUserData stands in for the cloud-init of a claim.
const testUserData = "#cloud-config\nwrite_files:\n- path: /etc/kubeadm/join.yaml\n  content: token=abcdef.0123456789abcdef-SECRET\n"

// hcloudRequest applies modules/hetzner-cloud with the real hcloud provider (from the
// tools' provider mirror) against the stand-in.
func hcloudRequest(t *testing.T, s *standin.StandIn, name, zone, nodeType string) tfrunner.Request {
	t.Helper()
	req := moduleRequest(t, s, name, zone, nodeType, map[string]string{"cluster": "fixtures"}, testUserData)
	req.Name = name
	req.Variables[tfrunner.VarLabels] = map[string]string{"karpenter.sh/nodepool": "default"}
	return req
}

// hcloudFailures are failures of the Hetzner Cloud API, provoked in the stand-in and run
// through the real provider: the fixture each leaves, and the class it must get.
var hcloudFailures = []struct {
	fixture string
	class   tfrunner.ErrorClass
	want    string // in the message
	// setup provokes the failure; it may change the request.
	setup func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request)
}{
	{fixture: "hcloud-resource-unavailable", class: tfrunner.Capacity, want: "(resource_unavailable",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			s.SetStockout("cx23", "fsn1", true)
		}},
	{fixture: "hcloud-resource-limit", class: tfrunner.Quota, want: "(resource_limit_exceeded",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			s.SetServerLimit(1)
			c := hcloud.NewClient(hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken(s.Token()))
			if _, _, err := c.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "existing", ServerType: &hcloud.ServerType{Name: "cx23"},
				Image: &hcloud.Image{Name: "ubuntu-24.04"}, Location: &hcloud.Location{Name: "fsn1"}}); err != nil {
				t.Fatal(err)
			}
		}},
	{fixture: "hcloud-placement-error", class: tfrunner.Capacity, want: "(placement_error",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			s.SetPlacementFailure("cx23", "fsn1", true)
		}},
	{fixture: "hcloud-invalid-location", class: tfrunner.InvalidModule, want: "invalid input in field 'location'",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			req.Variables[tfrunner.VarZone] = "mars1"
		}},
	{fixture: "hcloud-unknown-server-type", class: tfrunner.InvalidModule, want: "server type cx99 not found",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			req.Variables[tfrunner.VarNodeType] = "cx99"
		}},
	{fixture: "hcloud-unknown-image", class: tfrunner.InvalidModule, want: "image debian-99 for architecture x86 not found",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			req.Variables[tfrunner.VarParameters] = map[string]string{"cluster": "fixtures", "image": "debian-99"}
		}},
	{fixture: "hcloud-unauthorized", class: tfrunner.Credentials, want: "unable to authenticate",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) { s.RevokeToken() }},
	{fixture: "hcloud-token-malformed", class: tfrunner.Credentials, want: "entered token is invalid",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			req.Env["HCLOUD_TOKEN"] = "too-short"
		}},
	// The provider's client retries rate_limit_exceeded five times (about 31 s) before it
	// gives up; the budget here refills too slowly for any retry to succeed.
	{fixture: "hcloud-rate-limit", class: tfrunner.Transient, want: "(rate_limit_exceeded",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			s.SetRateLimit(36, time.Hour, 0)
		}},
	{fixture: "hcloud-server-error", class: tfrunner.Transient, want: "(server_error",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			s.Fail(standin.Failure{Code: standin.CodeServerError, Method: "POST", PathPrefix: "/servers"})
		}},
	// A server with a running action is locked: its destroy fails.
	{fixture: "hcloud-locked", class: tfrunner.Transient, want: "(locked",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *tfrunner.Request) {
			if res := tfrunner.Run(ctx, *req, &testenv.SyncBuffer{}, rules); !res.Succeeded {
				t.Fatalf("apply before the destroy: %v", res.Error)
			}
			c := hcloud.NewClient(hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken(s.Token()))
			srv, _, err := c.Server.GetByName(ctx, req.Variables[tfrunner.VarNodeName].(string))
			if err != nil || srv == nil {
				t.Fatalf("the applied server: %v", err)
			}
			s.SetActionDuration(5 * time.Minute)
			if _, _, err := c.Server.Poweroff(ctx, srv); err != nil {
				t.Fatal(err)
			}
			req.Operation, req.WorkDir = tfrunner.Destroy, t.TempDir()
		}},
}

// TestHcloudProviderDiagnostics provokes each Hetzner Cloud failure in the stand-in, runs
// modules/hetzner-cloud with the real provider, and checks the class Run gives it and that
// the provider's error diagnostics are the golden fixtures (testdata/diagnostics/hcloud-*),
// correlation IDs and times aside. With FULFILLER_UPDATE_FIXTURES=1 it rewrites them.
func TestHcloudProviderDiagnostics(t *testing.T) {
	t.Parallel()
	update := os.Getenv(updateFixturesEnv) == "1"
	for _, tc := range hcloudFailures {
		t.Run(tc.fixture, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// The fixtures hold the server's ID: this stand-in numbers its servers on its own.
			s := standin.StartT(t, standin.Options{FirstServerID: 101_000_001, CreateDuration: 200 * time.Millisecond, ActionDuration: 100 * time.Millisecond})
			req := hcloudRequest(t, s, "fixture-node", "fsn1", "cx23")
			tc.setup(ctx, t, s, &req)
			var log testenv.SyncBuffer
			res := tfrunner.Run(ctx, req, &log, rules)
			if res.Succeeded || res.Error == nil {
				t.Fatalf("run succeeded:\n%s", log.String())
			}
			if res.Error.Class != tc.class || !strings.Contains(res.Error.Message, tc.want) {
				t.Errorf("error = %v, want class %s with %q", res.Error, tc.class, tc.want)
			}
			// Only a rate-limited run carries when to retry: the budget's reset, an hour away.
			if limited := tc.fixture == "hcloud-rate-limit"; limited != (res.Error.RetryAfter != nil) ||
				limited && res.Error.RetryAfter.Before(time.Now().Add(50*time.Minute)) {
				t.Errorf("retry after %v (rate limited: %v)", res.Error.RetryAfter, limited)
			}
			var lines []string
			for _, line := range strings.Split(log.String(), "\n") {
				if d, ok := tfrunner.ParseDiagnostic([]byte(line)); ok && d.Severity == "error" {
					lines = append(lines, line)
				}
			}
			if len(lines) == 0 {
				t.Fatalf("no error diagnostics in\n%s", log.String())
			}
			path := filepath.Join(fixtureDir, tc.fixture+".jsonl")
			if update {
				if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (write the fixtures with %s=1)", err, updateFixturesEnv)
			}
			got, want := normalizeDiagnostics(t, lines), normalizeDiagnostics(t, strings.Split(strings.TrimSpace(string(golden)), "\n"))
			if got != want {
				t.Errorf("the provider's diagnostics differ from %s (rewrite with %s=1 if the provider changed):\ngot:\n%s\nwant:\n%s", path, updateFixturesEnv, got, want)
			}
		})
	}
}

// correlationID matches the correlation ID hcloud-go puts into API error messages.
var correlationID = regexp.MustCompile(`, [0-9a-f]{16}\)`)

// normalizeDiagnostics renders diagnostic lines without what differs between runs: the
// time, correlation IDs, and where in the module's source the diagnostic points (the
// module's files change for reasons the provider's words do not).
func normalizeDiagnostics(t *testing.T, lines []string) string {
	t.Helper()
	var out []string
	for _, line := range lines {
		var msg map[string]any
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			t.Fatalf("not a JSON line: %s", line)
		}
		delete(msg, "@timestamp")
		if diag, ok := msg["diagnostic"].(map[string]any); ok {
			delete(diag, "range")
			if snippet, ok := diag["snippet"].(map[string]any); ok {
				for _, k := range []string{"start_line", "highlight_start_offset", "highlight_end_offset"} {
					delete(snippet, k)
				}
			}
		}
		data, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, correlationID.ReplaceAllString(string(data), ", <correlation-id>)"))
	}
	return strings.Join(out, "\n")
}
