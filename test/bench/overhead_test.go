// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// overheadRounds is how many applies of each kind one iteration measures.
const overheadRounds = 5

// BenchmarkRunnerOverhead measures, in one run and alternating, a bare `tofu init` + `tofu
// apply -auto-approve` of the simulated module with the kubernetes state backend, and the same
// apply through the fulfiller's runner (`fulfiller run` started by the local executor: working
// directory, variables file, init, apply with -json streaming, outputs, result). Reported:
// the median of each and the runner's overhead (difference and ratio of the medians).
func BenchmarkRunnerOverhead(b *testing.B) {
	ctx := ctxFor(b, 30*time.Minute)
	cp := testenv.StartT(b, testenv.Options{})
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	build := buildFulfillerDev(b, dir)
	bin := build.bin
	simDir := filepath.Join(dir, "machines")
	module := filepath.Join(build.modules(), "sim")
	local := &executor.Local{Dir: filepath.Join(dir, "runs"), Command: []string{bin, "run"}, Limiter: executor.NewLimiter(executor.MaxRuns(1))}

	vars := func(name string) map[string]any {
		return map[string]any{
			"node_name": name, "node_type": "bench", "zone": "sim-a",
			"user_data":  "#cloud-config\n",
			"labels":     map[string]string{},
			"parameters": map[string]string{"sim_dir": simDir, "never_join": "true"},
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "KUBE_CONFIG_PATH=" + cp.Kubeconfig, "FULFILLER_BINARY=" + bin, "CHECKPOINT_DISABLE=1"}
	bare := func(name string) time.Duration {
		work := filepath.Join(dir, "bare", name)
		if err := os.MkdirAll(filepath.Dir(work), 0o700); err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command("cp", "-r", module, work).CombinedOutput(); err != nil {
			b.Fatalf("copying the module: %v\n%s", err, out)
		}
		data, _ := json.Marshal(vars(name))
		if err := os.WriteFile(filepath.Join(work, "vars.tfvars.json"), data, 0o600); err != nil {
			b.Fatal(err)
		}
		// The same partial backend block the runner adds.
		if err := os.WriteFile(filepath.Join(work, "backend.tf"), []byte("terraform {\n  backend \"kubernetes\" {}\n}\n"), 0o600); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, args := range [][]string{
			{"init", "-input=false", "-backend-config=secret_suffix=" + name, "-backend-config=namespace=default"},
			{"apply", "-auto-approve", "-input=false", "-var-file=vars.tfvars.json"},
		} {
			cmd := exec.CommandContext(ctx, tofu, args...)
			cmd.Dir, cmd.Env = work, env
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("tofu %s: %v\n%s", args[0], err, out)
			}
		}
		d := time.Since(start)
		cmd := exec.CommandContext(ctx, tofu, "destroy", "-auto-approve", "-input=false", "-var-file=vars.tfvars.json")
		cmd.Dir, cmd.Env = work, env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("tofu destroy: %v\n%s", err, out)
		}
		return d
	}
	runner := func(name string) time.Duration {
		req := func(op tfrunner.Operation) tfrunner.Request {
			return tfrunner.Request{
				Name: name + "-" + string(op), Operation: op, ModuleDir: module, WorkDir: filepath.Join(dir, "work", name+"-"+string(op)),
				Backend:   tfrunner.Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(statelock.Key(name), "default")},
				Variables: vars(name), Env: map[string]string{"KUBE_CONFIG_PATH": cp.Kubeconfig}, TofuPath: tofu,
			}
		}
		wait := func(r tfrunner.Request) time.Duration {
			start := time.Now()
			if err := local.Start(ctx, r); err != nil {
				b.Fatal(err)
			}
			for {
				st, err := local.Status(ctx, r.Name, "")
				if err != nil {
					b.Fatal(err)
				}
				if st.Phase == executor.RunSucceeded {
					return time.Since(start)
				}
				if st.Phase == executor.RunFailed {
					b.Fatalf("run %s failed: %+v", r.Name, st.Result.Error)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		d := wait(req(tfrunner.Apply))
		wait(req(tfrunner.Destroy))
		return d
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var bares, runs []time.Duration
		for r := 0; r < overheadRounds; r++ {
			bares = append(bares, bare(fmt.Sprintf("bare-%d-%d", i, r)))
			runs = append(runs, runner(fmt.Sprintf("run-%d-%d", i, r)))
		}
		mb, mr := median(bares), median(runs)
		b.ReportMetric(mb.Seconds(), "bare-apply-s")
		b.ReportMetric(mr.Seconds(), "runner-apply-s")
		b.ReportMetric((mr - mb).Seconds(), "overhead-s")
		b.ReportMetric(float64(mr)/float64(mb), "runner/bare")
		b.Logf("bare tofu init+apply: %s; fulfiller run: %s (medians of %d, alternating)", fmtDurations(bares), fmtDurations(runs), overheadRounds)
	}
}

func fmtDurations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(10*time.Millisecond).String())
	}
	return strings.Join(s, " ")
}
