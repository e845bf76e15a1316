// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// testMainEnv makes this test binary act as `fulfiller sim` when the stand-in's machines
// start it.
const testMainEnv = "HCLOUD_TEST_SIM"

var controlPlane *testenv.ControlPlane

func TestMain(m *testing.M) {
	if os.Getenv(testMainEnv) == "1" {
		args := os.Args[1:]
		if len(args) > 0 && args[0] == "sim" {
			args = args[1:]
		}
		os.Exit(sim.Main(args))
	}
	os.Setenv(testMainEnv, "1")
	os.Exit(testenv.RunMain(m, &controlPlane, testenv.Options{CRDs: testenv.DefaultCRDs()}))
}

// rules are the runner's rules of this family.
var rules = tfrunner.RuleSet{v1alpha1.FamilyHcloud: hcloudrules.Rules{}}

// tofuRC is the CLI configuration hack/tools.sh writes next to the tools' bin folder: tofu
// installs providers from the tools' filesystem mirror only.
func tofuRC(t *testing.T) string {
	t.Helper()
	rc := filepath.Join(filepath.Dir(testenv.ToolsBin()), "tofurc")
	data, err := os.ReadFile(rc)
	if err != nil || !strings.Contains(string(data), "filesystem_mirror") {
		t.Fatalf("the tools' tofurc %s (with the hcloud provider's mirror) is missing: run `make tools`: %v", rc, err)
	}
	return rc
}

func moduleDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "modules", "hetzner-cloud"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// startStandIn starts a stand-in whose servers boot simulated machines run by this test
// binary.
func startStandIn(t *testing.T, opts standin.Options) (*standin.StandIn, *standin.SimMachines) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := &testenv.SyncBuffer{}
	machines := &standin.SimMachines{Dir: t.TempDir(), Binary: []string{exe, "sim"}, StopGrace: 5 * time.Second,
		HeartbeatInterval: 2 * time.Second}
	opts.Machines = machines
	if opts.CreateDuration == 0 {
		opts.CreateDuration = 300 * time.Millisecond
	}
	if opts.ActionDuration == 0 {
		opts.ActionDuration = 200 * time.Millisecond
	}
	opts.Log = log
	s := standin.StartT(t, opts)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stand-in log:\n%s", log.String())
			logMachines(t, machines.Dir)
		}
	})
	return s, machines
}

// failedMachine is the server whose machine under dir reports that its join failed (`fulfiller
// sim` logs "join failed" and idles without a kubelet); "" when none does.
func failedMachine(dir string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*", sim.LogFile))
	for _, path := range logs {
		if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte(": join failed")) {
			return filepath.Base(filepath.Dir(path))
		}
	}
	return ""
}

// logMachines shows the log of each simulated machine under dir (one state dir per server):
// how far it got booting and joining.
func logMachines(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*", sim.LogFile))
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Logf("machine log %s: %v", path, err)
			continue
		}
		if len(data) > 8000 {
			data = append([]byte("...\n"), data[len(data)-8000:]...)
		}
		t.Logf("machine log of server %s:\n%s", filepath.Base(filepath.Dir(path)), data)
	}
	if len(logs) == 0 {
		t.Logf("no machine logs under %s", dir)
	}
}

// publicKey is an OpenSSH ed25519 public key line (the key itself is made up).
func publicKey(comment string) string {
	var blob []byte
	for _, part := range [][]byte{[]byte("ssh-ed25519"), []byte(strings.Repeat(comment, 32)[:32])} {
		blob = binary.BigEndian.AppendUint32(blob, uint32(len(part)))
		blob = append(blob, part...)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob) + " " + comment + "@example"
}

// moduleRequest is an apply of modules/hetzner-cloud against the stand-in with local state,
// as the runner makes it.
func moduleRequest(t *testing.T, s *standin.StandIn, name, zone, nodeType string, params map[string]string, userData string) tfrunner.Request {
	t.Helper()
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	p := map[string]string{"cluster": "test-cluster"}
	for k, v := range params {
		p[k] = v
	}
	return tfrunner.Request{
		Name:      name + "-apply-1",
		Operation: tfrunner.Apply,
		Family:    v1alpha1.FamilyHcloud,
		ModuleDir: moduleDir(t),
		WorkDir:   t.TempDir(),
		Backend:   tfrunner.Backend{Type: "local", Config: map[string]string{"path": filepath.Join(t.TempDir(), "state.tfstate")}},
		Variables: map[string]any{
			tfrunner.VarNodeName: name,
			tfrunner.VarNodeType: nodeType,
			tfrunner.VarZone:     zone,
			tfrunner.VarUserData: userData,
			tfrunner.VarLabels: map[string]string{
				"karpenter.sh/nodepool": "general-purpose", "node.kubernetes.io/instance-type": nodeType,
				"topology.kubernetes.io/zone": zone, "karpenter.sh/capacity-type": "on-demand",
			},
			tfrunner.VarParameters: p,
		},
		Env: map[string]string{
			"HCLOUD_ENDPOINT":    s.Endpoint(),
			"HCLOUD_TOKEN":       s.Token(),
			"TF_CLI_CONFIG_FILE": tofuRC(t),
		},
		TofuPath: tofu,
	}
}
