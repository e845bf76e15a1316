// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
	"github.com/fulfiller-sh/fulfiller/internal/proc"
)

// kwokEnv is Karpenter's own kwok provider on a control plane of the same binaries as the
// fulfiller's environment: `karpenter-kwok` (the kwok main package of the pinned Karpenter
// core, hack/tools.sh) creates a Node for each NodeClaim, and the kwok controller (with the
// default stages hack/tools.sh writes) makes it Ready and its pods Running, as a kubelet
// would.
type kwokEnv struct {
	cp        *controlplane.ControlPlane
	kube      client.Client
	karpenter *process
	kwok      *controlplane.Process
}

// kwokInstanceType is the one instance type of the kwok provider in the benchmarks, the same
// size and price as the fulfiller's simulated type, in the kwok provider's file format.
func kwokInstanceTypes(zone string, cpu, memory string) []byte {
	data, _ := json.Marshal([]map[string]any{{
		"name":             "bench",
		"architecture":     "amd64",
		"operatingSystems": []string{"linux"},
		"resources":        map[string]string{"cpu": cpu, "memory": memory, "pods": "110"},
		"offerings": []map[string]any{{
			"Price": 0.01, "Available": true,
			"Requirements": []map[string]any{
				{"key": "karpenter.sh/capacity-type", "operator": "In", "values": []string{"on-demand"}},
				{"key": "topology.kubernetes.io/zone", "operator": "In", "values": []string{zone}},
			},
		}},
	}})
	return data
}

// startKwok starts the control plane, the kwok controller and karpenter-kwok in dir, and
// makes the KWOKNodeClass "bench" whose nodes register after registrationDelay.
func startKwok(ctx context.Context, dir string, registrationDelay time.Duration) (env *kwokEnv, err error) {
	tools, err := controlplane.LookTools("karpenter-kwok", "kwok")
	if err != nil {
		return nil, err
	}
	stages := filepath.Join(controlplane.ToolsBin(), "kwok-stages.yaml")
	if _, err := os.Stat(stages); err != nil {
		return nil, fmt.Errorf("kwok's stages (hack/tools.sh writes them): %w", err)
	}
	crds := append(append([]*apiextensionsv1.CustomResourceDefinition{}, karpenterapis.CRDs...), kwokapis.CRDs...)
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "cluster"), CRDs: crds})
	if err != nil {
		return nil, err
	}
	env = &kwokEnv{cp: cp}
	defer func() {
		if err != nil {
			env.stop()
		}
	}()
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return nil, err
	}
	if env.kube, err = client.New(cp.Config, client.Options{Scheme: scheme.Scheme}); err != nil {
		return nil, err
	}
	// The nodes karpenter-kwok creates carry the annotation kwok.x-k8s.io/node=fake.
	env.kwok, err = controlplane.StartProcess("kwok", tools["kwok"], logs, nil,
		"--kubeconfig="+cp.Kubeconfig, "--config="+stages,
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-lease-duration-seconds=40")
	if err != nil {
		return nil, err
	}
	types := filepath.Join(dir, "instance-types.json")
	if err := os.WriteFile(types, kwokInstanceTypes(benchZone, benchCPU, benchMemory), 0o600); err != nil {
		return nil, err
	}
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		return nil, err
	}
	// The settings the fulfiller's local environment gives its controller.
	env.karpenter, err = startProcess(filepath.Join(logs, "karpenter-kwok.log"), []string{tools["karpenter-kwok"]},
		"KUBECONFIG="+cp.Kubeconfig, "DISABLE_LEADER_ELECTION=true", "LOG_LEVEL=info",
		"METRICS_PORT="+strconv.Itoa(ports[0]), "HEALTH_PROBE_PORT="+strconv.Itoa(ports[1]),
		"INSTANCE_TYPES_FILE_PATH="+types)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, 2*time.Minute, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), env.karpenter); err != nil {
		return nil, err
	}
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kwokapis.Group + "/v1alpha1", "kind": "KWOKNodeClass",
		"metadata": map[string]any{"name": "bench"},
		"spec":     map[string]any{"nodeRegistrationDelay": registrationDelay.String()},
	}}
	if registrationDelay == 0 {
		delete(class.Object, "spec")
	}
	if err := env.kube.Create(ctx, class); err != nil {
		return nil, fmt.Errorf("creating the KWOKNodeClass: %w", err)
	}
	return env, nil
}

func (e *kwokEnv) stop() {
	if e.karpenter != nil {
		e.karpenter.stop(15 * time.Second)
	}
	if e.kwok != nil {
		_ = e.kwok.Stop(15 * time.Second)
	}
	if e.cp != nil {
		_ = e.cp.Stop()
	}
}

// process is a child process of the benchmark with an environment of its own, its output in
// a log file, killed with the benchmark.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProcess(log string, command []string, env ...string) (*process, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", command[0], err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

func (p *process) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

// stop interrupts the process group, waits up to grace, then kills it.
func (p *process) stop(grace time.Duration) {
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}

// waitHTTP polls url until it answers 200, failing early when p exits.
func waitHTTP(ctx context.Context, timeout time.Duration, url string, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if done, err := p.exited(); done {
			return fmt.Errorf("the process exited (%w) before %s answered:\n%s", proc.WaitError(err), url, p.tail(3000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer within %s:\n%s", url, timeout, p.tail(3000))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
