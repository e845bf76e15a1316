// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/apitally"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	hcloudfamily "github.com/fulfiller-sh/fulfiller/internal/providers/hcloud"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// The lifecycle benchmark's settings: its nodes come up at once, each server's create action
// takes BENCH_HCLOUD_CREATE (default economyCreate, the Hetzner-like case's) and its machine
// economyBoot to boot; then the environment is left without nodes for BENCH_IDLE (default
// economyIdle) to count the controller's background reads.
const (
	economyNodes  = 5
	economyCreate = 30 * time.Second
	economyBoot   = 10 * time.Second
	economyIdle   = 10 * time.Minute
)

// The sources of the API's requests, told apart by their User-Agent.
const (
	sourceModule     = "module"     // tofu and the hcloud provider (hcloud-terraform/<version> hcloud-go/<version>)
	sourceController = "controller" // the family's catalogue, credentials checks and inventory
	sourceRunner     = "runner"     // the runner's rate-limit read (RetryAfter)
	sourceOther      = "other"
)

func source(agent string) string {
	switch {
	case strings.HasPrefix(agent, "hcloud-terraform/"):
		return sourceModule
	case agent == hcloudrules.AgentController:
		return sourceController
	case agent == hcloudrules.AgentRunner:
		return sourceRunner
	}
	return sourceOther
}

// BenchmarkHcloudRequestsPerNode counts the Hetzner Cloud API requests of node lifecycles:
// economyNodes claims of modules/hetzner-cloud (the real hcloud provider against the
// stand-in, create action economyCreate) from the workload's creation until every pod is
// bound (the applies), then from the workload's deletion until every server is gone and
// every claim's state removed (the destroys), on the local environment with a catalogue
// class (the catalogue, credentials checks and orphan collection all read the API). Then it
// counts the controller's background reads with no node for BENCH_IDLE. Each request is
// attributed by its User-Agent: the module's runs (tofu and the provider: look-ups, the
// create, action polls, reads), the controller's own reads and the runner's; an error answer
// (the client retries it) is counted in a column of its own as well.
//
// Reported: requests per node lifecycle (all sources; the module's apply and destroy runs
// apart) and the controller's background requests per hour at rest, with a table of
// endpoint × source. It fails when a run made more requests than the run limiter's
// estimate for it (hcloud.ApplyRequests, DestroyRequests), since the limiter would then
// admit runs the project's budget cannot pay.
func BenchmarkHcloudRequestsPerNode(b *testing.B) {
	idle := economyIdle
	if d, err := time.ParseDuration(os.Getenv("BENCH_IDLE")); err == nil && d > 0 {
		idle = d
	}
	create := economyCreate
	if d, err := time.ParseDuration(os.Getenv("BENCH_HCLOUD_CREATE")); err == nil && d > 0 {
		create = d
	}
	ctx := ctxFor(b, 40*time.Minute+idle)
	dir := b.TempDir()
	build := buildFulfillerDev(b, dir)
	rcEnv, err := providersEnv()
	if err != nil {
		b.Fatal(err)
	}
	api := standin.StartT(b, standin.Options{
		CreateDuration: create,
		Machines:       &standin.SimMachines{Dir: filepath.Join(dir, "machines"), Binary: sim.CommandBeside(build.bin), BootDelay: economyBoot, StopGrace: 5 * time.Second},
	})
	envDir := filepath.Join(dir, "env")
	kube, vars, down := devUp(b, build, envDir, devenv.ExecutorLocal, rcEnv)
	b.Cleanup(down)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: "hcloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
		StringData: map[string]string{"HCLOUD_TOKEN": api.Token(), "HCLOUD_ENDPOINT": api.Endpoint()}}
	class := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-hcloud"},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:      v1alpha1.FamilyHcloud,
			Module:      v1alpha1.ModuleSource{Source: filepath.Join(vars["MODULES"], "hetzner-cloud"), Version: "bench"},
			Credentials: []v1alpha1.CredentialsSource{{SecretName: secret.Name}},
			Bootstrap:   v1alpha1.BootstrapSpec{APIServerEndpoint: vars["API_SERVER"]},
			Variables:   map[string]string{"cluster": "bench"},
			Catalog: &v1alpha1.Catalog{
				Select: []v1alpha1.TypeSelector{{Names: []string{"cx23"}}},
				Zones:  []string{"fsn1"},
			},
		},
	}
	pool := createHcloudPool(b, ctx, kube, secret, class)

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("economy-%d", i)
		start := api.Counts()
		startAt := time.Now()
		if err := kube.Create(ctx, devenv.Workload(name, pool.Name, economyNodes, "1500m")); err != nil {
			b.Fatal(err)
		}
		if err := devenv.Poll(ctx, 20*time.Minute, time.Second, "every pod to be bound", func(ctx context.Context) (bool, error) {
			return devenv.PodsBound(ctx, kube, "default", map[string]string{"app": name}, economyNodes)
		}); err != nil {
			b.Fatal(err)
		}
		up := api.Counts()
		upAt := time.Now()
		if n := len(api.Servers()); n != economyNodes {
			b.Fatalf("%d servers for %d pods of 1500m on 2-CPU nodes; want one each", n, economyNodes)
		}
		if err := kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
			b.Fatal(err)
		}
		if err := devenv.Poll(ctx, 15*time.Minute, time.Second, "consolidation to destroy every server", func(ctx context.Context) (bool, error) {
			ok, _, err := devenv.Drained(ctx, kube)
			return ok && len(api.Servers()) == 0, err
		}); err != nil {
			b.Fatal(err)
		}
		done := api.Counts()
		doneAt := time.Now()
		b.StopTimer()
		time.Sleep(idle)
		rest := apitally.Minus(api.Counts(), done)
		reportEconomy(b, apitally.Minus(up, start), apitally.Minus(done, up), rest,
			create, upAt.Sub(startAt), doneAt.Sub(upAt), idle)
		b.StartTimer()
	}
}

// reportEconomy reports a lifecycle's requests (apply: from the workload's creation until
// every pod was bound; destroy: from its deletion until every server was gone) and the
// background requests in idle.
func reportEconomy(b *testing.B, apply, destroy, rest []apitally.Count, create, applyWall, destroyWall, idle time.Duration) {
	b.Helper()
	nodes := float64(economyNodes)
	bySource := func(counts []apitally.Count, src string) int {
		return apitally.Sum(counts, func(k apitally.Key) bool { return source(k.Agent) == src })
	}
	refused := func(counts []apitally.Count) int {
		return apitally.Sum(counts, func(k apitally.Key) bool { return k.Status >= http.StatusBadRequest })
	}
	applyModule, destroyModule := bySource(apply, sourceModule), bySource(destroy, sourceModule)
	lifecycle := apitally.Sum(apply, nil) + apitally.Sum(destroy, nil)
	perHour := float64(time.Hour) / float64(idle)
	restController := bySource(rest, sourceController)

	b.ReportMetric(float64(lifecycle)/nodes, "requests/node")
	b.ReportMetric(float64(applyModule)/nodes, "apply-run-requests/node")
	b.ReportMetric(float64(destroyModule)/nodes, "destroy-run-requests/node")
	b.ReportMetric(float64(bySource(apply, sourceController)+bySource(destroy, sourceController))/nodes, "controller-requests/node")
	b.ReportMetric(float64(refused(apply)+refused(destroy))/nodes, "refused/node")
	b.ReportMetric(float64(restController)*perHour, "controller-requests/h-at-rest")
	b.ReportMetric(float64(restController)*perHour/hcloudfamily.ProjectRequestsPerHour*100, "%-of-budget-at-rest")

	// The limiter's estimates must cover what a run asks of the API.
	if per := float64(applyModule) / nodes; per > hcloudfamily.ApplyRequests {
		b.Errorf("an apply run made %.1f requests; the run limiter counts it as %d (hcloud.ApplyRequests)", per, hcloudfamily.ApplyRequests)
	}
	if per := float64(destroyModule) / nodes; per > hcloudfamily.DestroyRequests {
		b.Errorf("a destroy run made %.1f requests; the run limiter counts it as %d (hcloud.DestroyRequests)", per, hcloudfamily.DestroyRequests)
	}
	if other := bySource(apply, sourceOther) + bySource(destroy, sourceOther) + bySource(rest, sourceOther); other > 0 {
		b.Errorf("%d requests came from an unknown User-Agent", other)
	}

	var out strings.Builder
	fmt.Fprintf(&out, "Hetzner Cloud API requests per node lifecycle, %d nodes (create action %s): applies until every pod bound (%s), destroys until every server gone (%s)\n",
		economyNodes, create, applyWall.Round(time.Second), destroyWall.Round(time.Second))
	writeEconomyTable(&out, []economyPhase{{"apply", apply}, {"destroy", destroy}}, 1/nodes, "%.1f")
	fmt.Fprintf(&out, "per node: %.1f requests (module: apply %.1f, destroy %.1f; controller %.1f; runner %.1f; refused %.1f)\n",
		float64(lifecycle)/nodes, float64(applyModule)/nodes, float64(destroyModule)/nodes,
		float64(bySource(apply, sourceController)+bySource(destroy, sourceController))/nodes,
		float64(bySource(apply, sourceRunner)+bySource(destroy, sourceRunner))/nodes, float64(refused(apply)+refused(destroy))/nodes)
	fmt.Fprintf(&out, "\nBackground requests at rest, no node, %s, per hour:\n", idle)
	writeEconomyTable(&out, []economyPhase{{"rest", rest}}, perHour, "%.0f")
	fmt.Fprintf(&out, "controller at rest: %.0f requests an hour, %.1f %% of the project's %d\n",
		float64(restController)*perHour, float64(restController)*perHour/hcloudfamily.ProjectRequestsPerHour*100, hcloudfamily.ProjectRequestsPerHour)
	b.Log("\n" + out.String())
}

type economyPhase struct {
	name   string
	counts []apitally.Count
}

// writeEconomyTable writes phase × endpoint rows with a column per source and one of the
// error answers, each count times scale.
func writeEconomyTable(out *strings.Builder, phases []economyPhase, scale float64, format string) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	sources := []string{sourceModule, sourceController, sourceRunner}
	fmt.Fprintf(w, "phase\tendpoint\t%s\trefused\t\n", strings.Join(sources, "\t"))
	for _, p := range phases {
		type row struct {
			by      map[string]int
			refused int
		}
		rows := map[string]*row{}
		for _, c := range p.counts {
			r := rows[c.Endpoint]
			if r == nil {
				r = &row{by: map[string]int{}}
				rows[c.Endpoint] = r
			}
			r.by[source(c.Agent)] += c.Requests
			if c.Status >= http.StatusBadRequest {
				r.refused += c.Requests
			}
		}
		endpoints := make([]string, 0, len(rows))
		for e := range rows {
			endpoints = append(endpoints, e)
		}
		slices.Sort(endpoints)
		for _, e := range endpoints {
			r := rows[e]
			fmt.Fprintf(w, "%s\t%s\t", p.name, e)
			for _, s := range sources {
				fmt.Fprintf(w, format+"\t", float64(r.by[s])*scale)
			}
			fmt.Fprintf(w, format+"\t\n", float64(r.refused)*scale)
		}
	}
	_ = w.Flush()
}
