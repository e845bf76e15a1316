// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// phaseRounds is how many applies (each followed by its destroy) one iteration measures per
// runner (BENCH_ROUNDS overrides it).
const phaseRounds = 7

// baselineRevEnv names a git revision whose runner BenchmarkRunPhases measures too,
// alternating with this tree's, so that before and after come from one session.
const baselineRevEnv = "BENCH_BASELINE_REV"

// runner is a runner binary and how it is run.
type phaseRunner struct {
	name  string
	build fulfillerBuild
	// cacheDir is the requests' CacheDir ("" for none), fresh: a new folder for every run.
	cacheDir string
	fresh    bool
	// job runs the runner as a runner Job does: the image's binary, `fulfiller run`. Else
	// as the local executor does: the runner binary beside the development binary.
	job bool
	// env is more environment for the runner; nice its niceness, as the local executor's
	// (executor.LocalRunNice), which tofu and its children inherit.
	env  []string
	nice int
}

// command is how the runner is started, and the environment the starter adds.
func (rn phaseRunner) command() ([]string, []string) {
	if rn.job {
		return []string{rn.build.bin, "run"}, []string{tfrunner.BinaryEnv + "=" + rn.build.bin}
	}
	return executor.RunnerBeside(rn.build.bin)
}

// runMeasure is what one run cost, seen from its parent and reported by the runner.
type runMeasure struct {
	wall, cpu time.Duration
	phases    []tfrunner.Phase
}

// BenchmarkRunPhases measures single runs of modules/sim with the kubernetes state backend,
// started as the local executor starts them (`fulfiller-runner --request ... --remove-request`
// in the run's folder, or `fulfiller-dev run ...` for a revision without the runner binary)
// or as a runner Job does (`fulfiller run`), one at a time: the wall-clock time from starting the runner until it
// has exited, and the CPU time (user + system) of the runner and every process it waited for,
// from the kernel's accounting of the waited-for child. The runner's own report splits both
// into phases: process start, module preparation, tofu's version check, init, the operation
// and the outputs; what remains after the last phase is writing the result and exiting.
// Runners measured, alternating: this tree's with a module cache kept across runs (the local
// executor), with no module cache (a runner Job, whose pod starts empty), with a fresh cache
// each run (a Job with a cache of its own), and, when BENCH_BASELINE_REV names a revision,
// that revision's runner. Reported: medians per runner and phase.
func BenchmarkRunPhases(b *testing.B) {
	ctx := ctxFor(b, 40*time.Minute)
	cp := testenv.StartT(b, testenv.Options{})
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cached := phaseRunner{name: "cached", build: buildFulfillerDev(b, dir), cacheDir: filepath.Join(dir, "cache")}
	runners := []phaseRunner{
		cached,
		{name: "no-cache", build: cached.build, job: true},
		{name: "fresh-cache", build: cached.build, cacheDir: filepath.Join(dir, "fresh"), fresh: true, job: true},
	}
	if rev := os.Getenv(baselineRevEnv); rev != "" {
		runners = append([]phaseRunner{{name: "baseline " + rev, build: buildRevision(b, rev, filepath.Join(dir, "baseline"))}}, runners...)
	}
	simDir := filepath.Join(dir, "machines")

	request := func(rn phaseRunner, claim string, op tfrunner.Operation) tfrunner.Request {
		name := claim + "-" + string(op)
		cache := rn.cacheDir
		if rn.fresh {
			cache = filepath.Join(rn.cacheDir, name)
		}
		return tfrunner.Request{
			Name: name, Operation: op, ModuleDir: filepath.Join(rn.build.modules(), "sim"),
			WorkDir:  filepath.Join(dir, "runs", name),
			CacheDir: cache, Shortcuts: true,
			Backend: tfrunner.Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(statelock.Key(claim), "default")},
			Variables: map[string]any{
				tfrunner.VarNodeName: claim, tfrunner.VarNodeType: "bench", tfrunner.VarZone: "sim-a",
				tfrunner.VarUserData: "#cloud-config\n", tfrunner.VarLabels: map[string]string{},
				tfrunner.VarParameters: map[string]string{"sim_dir": simDir, "never_join": "true"},
			},
			Env:      map[string]string{"KUBE_CONFIG_PATH": cp.Kubeconfig},
			TofuPath: tofu,
		}
	}
	// The first run of a module fills the shared cache; later runs measure the steady state.
	first := measureRun(b, ctx, cached, request(cached, "phases-warm-up", tfrunner.Apply))
	measureRun(b, ctx, cached, request(cached, "phases-warm-up", tfrunner.Destroy))
	b.Logf("the first run of the module with the cache (it fills the cache):\n%s", summarize([]runMeasure{first}).table("apply"))

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		applies := make([][]runMeasure, len(runners))
		destroys := make([][]runMeasure, len(runners))
		n := rounds(phaseRounds)
		for r := 0; r < n; r++ {
			for k, rn := range runners {
				claim := fmt.Sprintf("phases-%d-%d-%d", i, r, k)
				applies[k] = append(applies[k], measureRun(b, ctx, rn, request(rn, claim, tfrunner.Apply)))
				destroys[k] = append(destroys[k], measureRun(b, ctx, rn, request(rn, claim, tfrunner.Destroy)))
			}
		}
		b.StopTimer()
		for k, rn := range runners {
			a, d := summarize(applies[k]), summarize(destroys[k])
			metric := strings.ReplaceAll(strings.Fields(rn.name)[0], "-", "")
			b.ReportMetric(a.total.cpu.Seconds()*1000, metric+"-apply-cpu-ms")
			b.ReportMetric(a.total.wall.Seconds()*1000, metric+"-apply-wall-ms")
			b.ReportMetric(d.total.cpu.Seconds()*1000, metric+"-destroy-cpu-ms")
			b.Logf("runner %s, medians of %d runs:\n%s\n%s", rn.name, n, a.table("apply"), d.table("destroy"))
		}
		b.Logf("load: %s", loadAverage())
		b.StartTimer()
	}
}

// measureRun runs one request to its end as the local executor would and measures it.
func measureRun(b *testing.B, ctx context.Context, rn phaseRunner, req tfrunner.Request) runMeasure {
	b.Helper()
	m, err := runOnce(ctx, rn, req)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// runOnce runs one request to its end as the local executor would and measures it; a run
// that did not succeed is an error, with its log.
func runOnce(ctx context.Context, rn phaseRunner, req tfrunner.Request) (runMeasure, error) {
	if err := os.MkdirAll(req.WorkDir, 0o700); err != nil {
		return runMeasure{}, err
	}
	reqPath := filepath.Join(req.WorkDir, tfrunner.RequestFileName)
	if err := tfrunner.WriteRequest(reqPath, req); err != nil {
		return runMeasure{}, err
	}
	logFile, err := os.Create(filepath.Join(req.WorkDir, executor.LogFileName))
	if err != nil {
		return runMeasure{}, err
	}
	defer logFile.Close()
	command, env := rn.command()
	cmd := exec.CommandContext(ctx, command[0], append(command[1:], "--request", reqPath, "--remove-request")...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = req.WorkDir, logFile, logFile
	cmd.Env = append(append(os.Environ(), env...), rn.env...)
	if rn.nice != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	start := time.Now()
	runErr := cmd.Start()
	if runErr == nil && rn.nice != 0 {
		// The runner leads its own process group (Setpgid), as in the local executor.
		if err := executor.ReniceGroup(cmd.Process.Pid, rn.nice); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return runMeasure{}, fmt.Errorf("setting the runner's niceness: %w", err)
		}
	}
	if runErr == nil {
		runErr = cmd.Wait()
	}
	wall := time.Since(start)
	res, err := tfrunner.ReadResult(filepath.Join(req.WorkDir, tfrunner.ResultFileName))
	if err != nil || !res.Succeeded {
		log, _ := os.ReadFile(filepath.Join(req.WorkDir, executor.LogFileName))
		why := errors.Join(runErr, err)
		if res.Error != nil {
			why = errors.Join(why, res.Error)
		}
		if why == nil {
			why = errors.New("the result says it failed, without an error")
		}
		return runMeasure{}, fmt.Errorf("run %s: %w\n%s", req.Name, why, log)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	m := runMeasure{wall: wall, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), phases: res.Phases}
	// What the runner cannot see of itself: the end (writing the result, exiting) after its
	// last phase. The parent's clock times its start better than /proc does.
	var startCPU, runCPU time.Duration
	for i, p := range m.phases {
		if p.Name == tfrunner.PhaseStart {
			m.phases[i].Wall = res.Started.Sub(start)
			startCPU = p.CPU
			continue
		}
		runCPU += p.CPU
	}
	m.phases = append(m.phases, tfrunner.Phase{Name: "result", Wall: max(wall-m.phaseWall(), 0), CPU: max(m.cpu-startCPU-runCPU, 0)})
	return m, nil
}

func (m runMeasure) phaseWall() time.Duration {
	var total time.Duration
	for _, p := range m.phases {
		total += p.Wall
	}
	return total
}

// phaseSummary holds medians per phase (in the order phases first appear) and of the totals.
type phaseSummary struct {
	names  []string
	phases map[string]runMeasure
	counts map[string]int
	total  runMeasure
	n      int
}

func summarize(ms []runMeasure) phaseSummary {
	s := phaseSummary{phases: map[string]runMeasure{}, counts: map[string]int{}, n: len(ms)}
	walls, cpus := map[string][]time.Duration{}, map[string][]time.Duration{}
	var totalWall, totalCPU []time.Duration
	for _, m := range ms {
		totalWall, totalCPU = append(totalWall, m.wall), append(totalCPU, m.cpu)
		for _, p := range m.phases {
			if _, seen := walls[p.Name]; !seen {
				s.names = append(s.names, p.Name)
			}
			walls[p.Name] = append(walls[p.Name], p.Wall)
			cpus[p.Name] = append(cpus[p.Name], p.CPU)
		}
	}
	for _, name := range s.names {
		s.phases[name] = runMeasure{wall: median(walls[name]), cpu: median(cpus[name])}
		s.counts[name] = len(walls[name])
	}
	s.total = runMeasure{wall: median(totalWall), cpu: median(totalCPU)}
	return s
}

// table is a Markdown table of the medians.
func (s phaseSummary) table(op string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s phase | wall ms | CPU ms |\n|---|---:|---:|\n", op)
	for _, name := range s.names {
		p, label := s.phases[name], name
		if s.counts[name] < s.n {
			label = fmt.Sprintf("%s (%d of %d runs)", name, s.counts[name], s.n)
		}
		fmt.Fprintf(&b, "| %s | %d | %d |\n", label, p.wall.Milliseconds(), p.cpu.Milliseconds())
	}
	fmt.Fprintf(&b, "| **whole run** | **%d** | **%d** |", s.total.wall.Milliseconds(), s.total.cpu.Milliseconds())
	return b.String()
}

// buildRevision builds the development binary of a git revision of this repository, from
// `git archive`, into dir; the build's runs use that revision's modules.
func buildRevision(b *testing.B, rev, dir string) fulfillerBuild {
	b.Helper()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o700); err != nil {
		b.Fatal(err)
	}
	// The files get the umask's permissions, as in a checkout (git archive writes 0664, which
	// root's tar keeps, and runners before 2026-12-01 could not cache such modules).
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x --no-same-permissions -C "$3"`, "sh", root(), rev, src)
	if out, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("extracting %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(dir, "fulfiller-dev")
	pkgs := []string{"./cmd/fulfiller-dev"}
	for _, cmd := range []string{"fulfiller-runner", "fulfiller-sim"} { // revisions from 2026-12-01 on
		if _, err := os.Stat(filepath.Join(src, "cmd", cmd)); err == nil {
			pkgs = append(pkgs, "./cmd/"+cmd)
		}
	}
	build := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	build.Dir, build.Stdout, build.Stderr = src, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		b.Fatalf("building %s: %v", rev, err)
	}
	return fulfillerBuild{bin: bin, src: src}
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
