// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// The floor of a design with one OpenTofu run per claim, measured beside kwok.
//
// kwok makes a Node for each claim at once and runs nothing else. The fulfiller, besides
// what Karpenter does in both, makes each node with a run: the runner and one `tofu apply`
// with the kubernetes state backend. floorRuns adds that alone to a kwok burst: as each claim
// appears, one real run (this tree's runner binary, the module cache and niceness of the local
// executor), as many at once as the local executor would run on this machine. In the modules/sim cases
// the module makes nothing but a terraform_data resource; in the Hetzner-like case it is
// modules/hetzner-cloud with the real hcloud provider against the Hetzner Cloud stand-in,
// whose servers have no machines. No machine starts and the fulfiller's controller does not
// run, and kwok's Nodes do not wait for the runs: the runs only take CPU from Karpenter, the
// API server and kwok. The floor's last node is the later of kwok's and the earliest a node
// made by the runs could register: the last machine's power-on (when a run created its
// resource, or when the last server's create action ended) plus the boot. Where runs use the
// CPU throughout (modules/sim), the order they start in changes little, and a burst of the
// floor is, within the rounds' spread, the best a provider that applies a module per claim
// can reach on this machine. Where runs wait (the Hetzner-like case), another order can come out ahead of the
// floor's (every run as its claim appears), so there it is an estimate, not a bound.

// floorModule is the module of the floor's runs in the modules/sim cases: one resource in the
// state, and the outputs a run of an apply must report.
const floorModule = `variable "node_name" {
  type = string
}

resource "terraform_data" "machine" {
  input = var.node_name
}

output "provider_id" {
  value = "floor://${terraform_data.machine.output}"
}

output "node_name" {
  value = var.node_name
}
`

// floorRuns runs one apply per claim beside a burst and adds up what the runs took.
type floorRuns struct {
	c          burstCase
	runner     phaseRunner
	dir        string
	module     string
	kubeconfig string
	tofu       string
	hcloud     *standin.StandIn // the Hetzner-like case's API, nil otherwise
	slots      chan struct{}
	wg         sync.WaitGroup

	mu sync.Mutex
	// cpu is the runs' CPU time; lastCreated when the last run's resource was created.
	cpu         time.Duration
	lastCreated time.Time
	errs        []error
}

// newFloorRuns prepares the runs of burst c in dir against the API server of kubeconfig: the
// module, and its cache filled by a first run, as the local executor's cache is once the
// node type has run.
func newFloorRuns(ctx context.Context, build fulfillerBuild, dir, kubeconfig string, c burstCase) (*floorRuns, error) {
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		return nil, err
	}
	machine, err := executor.ThisMachine()
	if err != nil {
		return nil, err
	}
	f := &floorRuns{
		c:      c,
		runner: phaseRunner{name: "floor", build: build, cacheDir: filepath.Join(dir, "cache"), nice: executor.LocalRunNice},
		dir:    dir, kubeconfig: kubeconfig, tofu: tofu,
		slots: make(chan struct{}, machine.Max()),
	}
	if c.hetzner {
		rcEnv, err := providersEnv()
		if err != nil {
			return nil, err
		}
		f.runner.env = []string{rcEnv}
		f.module = filepath.Join(build.modules(), "hetzner-cloud")
		if f.hcloud, err = standin.Start(standin.Options{CreateDuration: c.create}); err != nil {
			return nil, err
		}
	} else {
		f.module = filepath.Join(dir, "module")
		if err := os.MkdirAll(f.module, 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(f.module, "main.tf"), []byte(floorModule), 0o600); err != nil {
			return nil, err
		}
	}
	if _, err := runOnce(ctx, f.runner, f.request("floor-warm-up")); err != nil {
		f.close()
		return nil, fmt.Errorf("warming the module cache: %w", err)
	}
	return f, nil
}

// request is the apply of the claim's node, with the variables the fulfiller passes.
func (f *floorRuns) request(claim string) tfrunner.Request {
	req := tfrunner.Request{
		Name: claim + "-apply", Operation: tfrunner.Apply, ModuleDir: f.module,
		WorkDir:  filepath.Join(f.dir, "runs", claim),
		CacheDir: f.runner.cacheDir, Shortcuts: true,
		Backend: tfrunner.Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(statelock.Key(claim), "default")},
		Variables: map[string]any{
			tfrunner.VarNodeName: claim, tfrunner.VarNodeType: "bench", tfrunner.VarZone: benchZone,
			tfrunner.VarUserData: "#cloud-config\n", tfrunner.VarLabels: map[string]string{karpv1.NodePoolLabelKey: benchPool},
			tfrunner.VarParameters: map[string]string{},
		},
		Env:      map[string]string{"KUBE_CONFIG_PATH": f.kubeconfig},
		TofuPath: f.tofu,
	}
	if f.hcloud != nil {
		// The server type, location and variables of the fulfiller's class in this case.
		class := hetznerNodeClass(nil)
		nt := class.Spec.NodeTypes[0]
		req.Variables[tfrunner.VarNodeType], req.Variables[tfrunner.VarZone] = nt.Name, nt.Offerings[0].Zone
		req.Variables[tfrunner.VarParameters] = class.Spec.Variables
		req.Env["HCLOUD_TOKEN"], req.Env["HCLOUD_ENDPOINT"] = f.hcloud.Token(), f.hcloud.Endpoint()
	}
	return req
}

// start runs the claim's apply once a slot is free.
func (f *floorRuns) start(ctx context.Context, claim string) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		select {
		case f.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-f.slots }()
		req := f.request(claim)
		m, err := runOnce(ctx, f.runner, req)
		var created time.Time
		if err == nil {
			created, err = resourceCreated(filepath.Join(req.WorkDir, executor.LogFileName))
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.cpu += m.cpu
		if created.After(f.lastCreated) {
			f.lastCreated = created
		}
		if err != nil {
			f.errs = append(f.errs, err)
		}
	}()
}

// wait waits for every run started, and returns their CPU time and the earliest the last
// node made by them could register, from start; or the runs' errors.
func (f *floorRuns) wait(start time.Time) (cpu, lastNode time.Duration, err error) {
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := errors.Join(f.errs...); err != nil {
		return 0, 0, err
	}
	// In the modules/sim cases a machine powers on when its resource is created (modules/sim
	// starts it in the resource's provisioner).
	powerOn := f.lastCreated.Sub(start)
	if f.hcloud != nil {
		powerOn = maxOf(f.serversCreated(start)) + f.c.create
	}
	return f.cpu, powerOn + f.c.boot, nil
}

// serversCreated is when the stand-in created each server of the burst that began at start
// (POST /servers answered), from start; nil without a stand-in.
func (f *floorRuns) serversCreated(start time.Time) []time.Duration {
	if f.hcloud == nil {
		return nil
	}
	var out []time.Duration
	for _, srv := range f.hcloud.Servers() {
		if srv.Created.After(start) { // not the warm-up's
			out = append(out, srv.Created.Sub(start))
		}
	}
	return out
}

// resourceCreated is when the first resource of a run was created: the timestamp of the
// first apply_complete message of tofu's stream in the run log.
func resourceCreated(logPath string) (time.Time, error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		var msg struct {
			Type      string `json:"type"`
			Timestamp string `json:"@timestamp"`
		}
		if json.Unmarshal([]byte(line), &msg) != nil || msg.Type != "apply_complete" {
			continue
		}
		return time.Parse(time.RFC3339Nano, msg.Timestamp)
	}
	return time.Time{}, fmt.Errorf("%s: no apply_complete message", logPath)
}

func (f *floorRuns) close() {
	if f.hcloud != nil {
		_ = f.hcloud.Close()
	}
}
