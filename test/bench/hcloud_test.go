// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// createBound is what one CloudProvider.Create may take: it never waits for an apply (it
// answers AwaitingProviderID until the apply reports the provider ID), so a call is a few
// reads, and a slow one on a loaded machine still ends well within this.
const createBound = 5 * time.Second

// BenchmarkBurst20HcloudClaims: 20 claims at once on the path where the provider ID is not
// known before the apply (Hetzner Cloud server IDs): modules/hetzner-cloud with the real
// hcloud provider against the API stand-in, on the local environment with the Job executor.
// It checks that no claim got a second server (one successful POST /servers per claim, each
// server labelled with its own claim) and that every node registered as hcloud://<its
// server's id>, and that no CloudProvider.Create call — what Karpenter's launch waits on —
// took longer than createBound (fulfiller_cloudprovider_create_duration_seconds).
// Reported: the distribution of Create calls (p50, p90, max bucket; calls that answered
// AwaitingProviderID), claim→Launched and claim→Initialized medians, and the time
// until all pods were bound.
func BenchmarkBurst20HcloudClaims(b *testing.B) {
	ctx := ctxFor(b, 40*time.Minute)
	dir := b.TempDir()
	build := buildFulfillerDev(b, dir)
	api := standin.StartT(b, standin.Options{
		Machines: &standin.SimMachines{Dir: filepath.Join(dir, "machines"), Binary: sim.CommandBeside(build.bin), StopGrace: 5 * time.Second},
	})
	envDir := filepath.Join(dir, "env")
	kube, vars, down := devUp(b, build, envDir, devenv.ExecutorJob)
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
			NodeTypes: []v1alpha1.NodeType{{
				Name:      "cx23",
				Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("3800Mi")},
				Offerings: []v1alpha1.Offering{{Zone: "fsn1", Price: "0.0056"}},
			}},
		},
	}
	pool := createHcloudPool(b, ctx, kube, secret, class)

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("hcloud-burst-%d", i)
		before := scrapeCreate(b, envDir)
		if err := kube.Create(ctx, devenv.Workload(name, pool.Name, burstClaims, "1500m")); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := devenv.Poll(ctx, 25*time.Minute, time.Second, "every pod to be bound", func(ctx context.Context) (bool, error) {
			return devenv.PodsBound(ctx, kube, "default", map[string]string{"app": name}, burstClaims)
		}); err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		b.StopTimer()
		reportHcloud(b, ctx, kube, api, scrapeCreate(b, envDir).minus(before), wall)
		_ = kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
		if err := devenv.Poll(ctx, 15*time.Minute, time.Second, "consolidation to destroy every server", func(ctx context.Context) (bool, error) {
			ok, _, err := devenv.Drained(ctx, kube)
			return ok && len(api.Servers()) == 0, err
		}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// reportHcloud checks one burst — one server per claim, nodes as hcloud://<id> — and reports
// the Create calls' distribution and the claims' medians.
func reportHcloud(b *testing.B, ctx context.Context, kube client.Client, api *standin.StandIn, creates createHistogram, wall time.Duration) {
	created := 0
	for _, r := range api.Requests() {
		if r.Method == "POST" && r.Path == "/servers" && r.Status == http.StatusCreated {
			created++
		}
	}
	servers := map[string]string{} // claim → provider ID
	for _, s := range api.Servers() {
		claim := s.Labels["fulfiller.sh/node"]
		if _, twice := servers[claim]; twice {
			b.Errorf("claim %s has a second server %d", claim, s.ID)
		}
		servers[claim] = fmt.Sprintf("hcloud://%d", s.ID)
	}
	claims := &karpv1.NodeClaimList{}
	if err := kube.List(ctx, claims); err != nil {
		b.Fatal(err)
	}
	if created != burstClaims || len(servers) != burstClaims || len(claims.Items) != burstClaims {
		b.Errorf("%d servers created (%d now) for %d claims; want %d of each", created, len(servers), len(claims.Items), burstClaims)
	}
	var launched, initialized []time.Duration
	for _, c := range claims.Items {
		node := &corev1.Node{}
		if err := kube.Get(ctx, client.ObjectKey{Name: c.Status.NodeName}, node); err != nil {
			b.Errorf("node of claim %s: %v", c.Name, err)
			continue
		}
		if want := servers[c.Name]; want == "" || c.Status.ProviderID != want || node.Spec.ProviderID != want {
			b.Errorf("claim %s: provider ID %q, node's %q, its server's %q", c.Name, c.Status.ProviderID, node.Spec.ProviderID, want)
		}
		for cond, into := range map[string]*[]time.Duration{karpv1.ConditionTypeLaunched: &launched, karpv1.ConditionTypeInitialized: &initialized} {
			if got := c.StatusConditions().Get(cond); got != nil && got.IsTrue() {
				*into = append(*into, got.LastTransitionTime.Sub(c.CreationTimestamp.Time))
			}
		}
	}
	if creates.count == 0 {
		b.Fatal("no CloudProvider.Create call was measured")
	}
	if over := creates.countAbove(createBound.Seconds()); over > 0 {
		b.Errorf("%d of %d Create calls took longer than %s", over, creates.count, createBound)
	}
	sort.Slice(launched, func(i, j int) bool { return launched[i] < launched[j] })
	b.ReportMetric(creates.quantile(0.5), "create-p50-s")
	b.ReportMetric(creates.quantile(0.9), "create-p90-s")
	b.ReportMetric(creates.quantile(1), "create-max-bucket-s")
	b.ReportMetric(float64(creates.awaiting), "create-awaiting")
	b.ReportMetric(median(launched).Seconds(), "claim-to-launched-median-s")
	b.ReportMetric(median(initialized).Seconds(), "claim-to-initialized-median-s")
	b.ReportMetric(wall.Seconds(), "all-bound-s")
	b.Logf("Create calls: %d (%d returned the apply's provider ID, %d answered AwaitingProviderID, mean %.3fs); cumulative buckets: %s",
		creates.count, creates.reported, creates.awaiting, creates.sum/float64(creates.count), creates.String())
	if len(launched) > 0 {
		b.Logf("claim→Launched min %s median %s max %s; claim→Initialized median %s; %d servers for %d claims; all pods bound after %s",
			launched[0].Round(100*time.Millisecond), median(launched).Round(100*time.Millisecond), launched[len(launched)-1].Round(100*time.Millisecond),
			median(initialized).Round(100*time.Millisecond), created, len(claims.Items), wall.Round(time.Second))
	}
}

// createHistogram is fulfiller_cloudprovider_create_duration_seconds summed over its labels.
type createHistogram struct {
	bounds             []float64 // upper bounds, ascending; +Inf last
	cumulative         []uint64
	count              uint64
	sum                float64
	reported, awaiting uint64
}

func (h createHistogram) minus(o createHistogram) createHistogram {
	out := h
	out.cumulative = append([]uint64(nil), h.cumulative...)
	for i := range out.cumulative {
		if i < len(o.cumulative) {
			out.cumulative[i] -= o.cumulative[i]
		}
	}
	out.count, out.sum = h.count-o.count, h.sum-o.sum
	out.reported, out.awaiting = h.reported-o.reported, h.awaiting-o.awaiting
	return out
}

// countAbove is how many observations lie in buckets above the bound le.
func (h createHistogram) countAbove(le float64) uint64 {
	for i, bound := range h.bounds {
		if bound >= le {
			return h.count - h.cumulative[i]
		}
	}
	return 0
}

// quantile is the upper bound of the bucket that holds the q-quantile.
func (h createHistogram) quantile(q float64) float64 {
	rank := uint64(math.Ceil(q * float64(h.count)))
	for i, c := range h.cumulative {
		if c >= rank && c > 0 {
			return h.bounds[i]
		}
	}
	return math.Inf(1)
}

func (h createHistogram) String() string {
	var parts []string
	for i, bound := range h.bounds {
		parts = append(parts, fmt.Sprintf("≤%gs:%d", bound, h.cumulative[i]))
	}
	return strings.Join(parts, " ")
}

// scrapeCreate reads the Create histogram from the controller's metrics endpoint.
func scrapeCreate(b *testing.B, envDir string) createHistogram {
	b.Helper()
	port, err := os.ReadFile(devenv.Layout{Dir: envDir}.MetricsPortFile())
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%s/metrics", strings.TrimSpace(string(port))))
	if err != nil {
		b.Fatalf("scraping metrics: %v", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatalf("parsing metrics: %v", err)
	}
	var h createHistogram
	fam, ok := families["fulfiller_cloudprovider_create_duration_seconds"]
	if !ok {
		return h
	}
	for _, m := range fam.GetMetric() {
		hist := m.GetHistogram()
		h.count += hist.GetSampleCount()
		h.sum += hist.GetSampleSum()
		switch labelOf(m, "provider_id") {
		case "reported":
			h.reported += hist.GetSampleCount()
		case "awaiting":
			h.awaiting += hist.GetSampleCount()
		}
		// The text format's buckets end with +Inf, which holds every observation.
		if h.bounds == nil {
			for _, bucket := range hist.GetBucket() {
				h.bounds = append(h.bounds, bucket.GetUpperBound())
			}
			if len(h.bounds) == 0 || !math.IsInf(h.bounds[len(h.bounds)-1], 1) {
				h.bounds = append(h.bounds, math.Inf(1))
			}
			h.cumulative = make([]uint64, len(h.bounds))
		}
		for i, bucket := range hist.GetBucket() {
			if !math.IsInf(bucket.GetUpperBound(), 1) {
				h.cumulative[i] += bucket.GetCumulativeCount()
			}
		}
		h.cumulative[len(h.cumulative)-1] += hist.GetSampleCount()
	}
	return h
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// createHcloudPool creates the credentials Secret, the Hetzner Cloud class and a NodePool of
// it (on-demand, consolidating after 5 s) and waits for the class to be Ready.
func createHcloudPool(b *testing.B, ctx context.Context, kube client.Client, secret *corev1.Secret, class *v1alpha1.TofuNodeClass) *karpv1.NodePool {
	b.Helper()
	pool := &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-hcloud"},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
				NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.Group, Kind: "TofuNodeClass", Name: class.Name},
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}},
			}},
			Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: karpv1.MustParseNillableDuration("5s")},
		},
	}
	for _, o := range []client.Object{secret, class, pool} {
		if err := kube.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	if err := devenv.Poll(ctx, 2*time.Minute, 500*time.Millisecond, "the nodeclass to be Ready", func(ctx context.Context) (bool, error) {
		return devenv.NodeClassReady(ctx, kube, class.Name)
	}); err != nil {
		b.Fatal(err)
	}
	return pool
}
