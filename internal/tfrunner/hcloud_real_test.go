package tfrunner

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
)

// updateFixturesEnv rewrites the golden fixtures of TestHcloudProviderDiagnostics from the
// runs instead of comparing them.
const updateFixturesEnv = "FULFILLER_UPDATE_FIXTURES"

// hcloudRequest applies modules/hetzner-cloud with the real hcloud provider (from the
// tools' provider mirror) against the stand-in.
func hcloudRequest(t *testing.T, s *standin.StandIn, name, zone, nodeType string) Request {
	t.Helper()
	module, err := filepath.Abs(filepath.Join("..", "..", "modules", "hetzner-cloud"))
	if err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(filepath.Dir(testenv.ToolsBin()), "tofurc")
	if data, err := os.ReadFile(rc); err != nil || !strings.Contains(string(data), "filesystem_mirror") {
		t.Fatalf("the tools' tofurc %s (with the hcloud provider's mirror) is missing: run `make tools`: %v", rc, err)
	}
	return Request{
		Name:      name,
		Operation: Apply,
		ModuleDir: module,
		WorkDir:   t.TempDir(),
		Backend:   Backend{Type: "local", Config: map[string]string{"path": filepath.Join(t.TempDir(), "state.tfstate")}},
		Variables: map[string]any{
			VarNodeName:   name,
			VarNodeType:   nodeType,
			VarZone:       zone,
			VarUserData:   testUserData,
			VarLabels:     map[string]string{"karpenter.sh/nodepool": "default"},
			VarParameters: map[string]string{"cluster": "fixtures"},
		},
		Env:      map[string]string{"HCLOUD_ENDPOINT": s.Endpoint(), "HCLOUD_TOKEN": s.Token(), "TF_CLI_CONFIG_FILE": rc},
		TofuPath: tofuPath(t),
	}
}

// hcloudFailures are failures of the Hetzner Cloud API, provoked in the stand-in and run
// through the real provider: the fixture each leaves, and the class it must get.
var hcloudFailures = []struct {
	fixture string
	class   ErrorClass
	want    string // in the message
	// setup provokes the failure; it may change the request.
	setup func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request)
}{
	{fixture: "hcloud-resource-unavailable", class: Capacity, want: "(resource_unavailable",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			s.SetStockout("cx23", "fsn1", true)
		}},
	{fixture: "hcloud-resource-limit", class: Quota, want: "(resource_limit_exceeded",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			s.SetServerLimit(1)
			c := hcloud.NewClient(hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken(s.Token()))
			if _, _, err := c.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "existing", ServerType: &hcloud.ServerType{Name: "cx23"},
				Image: &hcloud.Image{Name: "ubuntu-24.04"}, Location: &hcloud.Location{Name: "fsn1"}}); err != nil {
				t.Fatal(err)
			}
		}},
	{fixture: "hcloud-placement-error", class: Capacity, want: "(placement_error",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			s.SetPlacementFailure("cx23", "fsn1", true)
		}},
	{fixture: "hcloud-invalid-location", class: InvalidModule, want: "invalid input in field 'location'",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			req.Variables[VarZone] = "mars1"
		}},
	{fixture: "hcloud-unknown-server-type", class: InvalidModule, want: "server type cx99 not found",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			req.Variables[VarNodeType] = "cx99"
		}},
	{fixture: "hcloud-unknown-image", class: InvalidModule, want: "image debian-99 for architecture x86 not found",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			req.Variables[VarParameters] = map[string]string{"cluster": "fixtures", "image": "debian-99"}
		}},
	{fixture: "hcloud-unauthorized", class: Credentials, want: "unable to authenticate",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) { s.RevokeToken() }},
	{fixture: "hcloud-token-malformed", class: Credentials, want: "entered token is invalid",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			req.Env["HCLOUD_TOKEN"] = "too-short"
		}},
	// The provider's client retries rate_limit_exceeded five times (about 31 s) before it
	// gives up; the budget here refills too slowly for any retry to succeed.
	{fixture: "hcloud-rate-limit", class: Transient, want: "(rate_limit_exceeded",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			s.SetRateLimit(36, time.Hour, 0)
		}},
	{fixture: "hcloud-server-error", class: Transient, want: "(server_error",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			s.Fail(standin.Failure{Code: standin.CodeServerError, Method: "POST", PathPrefix: "/servers"})
		}},
	// A server with a running action is locked: its destroy fails.
	{fixture: "hcloud-locked", class: Transient, want: "(locked",
		setup: func(ctx context.Context, t *testing.T, s *standin.StandIn, req *Request) {
			if res := Run(ctx, *req, &testenv.SyncBuffer{}); !res.Succeeded {
				t.Fatalf("apply before the destroy: %v", res.Error)
			}
			c := hcloud.NewClient(hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken(s.Token()))
			srv, _, err := c.Server.GetByName(ctx, req.Variables[VarNodeName].(string))
			if err != nil || srv == nil {
				t.Fatalf("the applied server: %v", err)
			}
			s.SetActionDuration(5 * time.Minute)
			if _, _, err := c.Server.Poweroff(ctx, srv); err != nil {
				t.Fatal(err)
			}
			req.Operation, req.WorkDir = Destroy, t.TempDir()
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
			s := standin.StartT(t, standin.Options{CreateDuration: 200 * time.Millisecond, ActionDuration: 100 * time.Millisecond})
			req := hcloudRequest(t, s, "fixture-node", "fsn1", "cx23")
			tc.setup(ctx, t, s, &req)
			var log testenv.SyncBuffer
			res := Run(ctx, req, &log)
			if res.Succeeded || res.Error == nil {
				t.Fatalf("run succeeded:\n%s", log.String())
			}
			if res.Error.Class != tc.class || !strings.Contains(res.Error.Message, tc.want) {
				t.Errorf("error = %v, want class %s with %q", res.Error, tc.class, tc.want)
			}
			var lines []string
			for _, line := range strings.Split(log.String(), "\n") {
				if d, ok := parseDiagnostic([]byte(line)); ok && d.Severity == "error" {
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
