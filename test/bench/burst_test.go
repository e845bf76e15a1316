// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// burstClaims is how many claims one burst makes at once.
const burstClaims = 20

// BenchmarkBurst20Claims runs the whole pipeline for 20 claims at once on the local
// environment with the Job executor (runner Jobs run by the stand-in kubelet, real tofu, real
// kubernetes state backend, real joins): 20 pending pods that each need their own node.
// Reported: tofu apply runs completed per minute (20 over the time from the first apply's
// start to the last one's end), the median apply run, and the median claim-to-Initialized
// time. Concurrency is the controller's default bound (the runner node's capacity for runner
// pods; FULFILLER_MAX_CONCURRENT_RUNS caps it when the environment sets it).
func BenchmarkBurst20Claims(b *testing.B) {
	ctx := ctxFor(b, 30*time.Minute)
	dir := b.TempDir()
	build := buildFulfillerDev(b, dir)
	envDir := filepath.Join(dir, "env")
	kube, vars, down := devUp(b, build, envDir, devenv.ExecutorJob)
	b.Cleanup(down)
	class := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:    v1alpha1.FamilySim,
			Module:    v1alpha1.ModuleSource{Source: filepath.Join(vars["MODULES"], "sim"), Version: "bench"},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: vars["API_SERVER"]},
			Variables: map[string]string{"sim_dir": vars["SIM_DIR"], "boot_delay": "1s"},
			NodeTypes: []v1alpha1.NodeType{{
				Name:               "bench",
				Capacity:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
				ProviderIDTemplate: "sim://{name}",
				Offerings:          []v1alpha1.Offering{{Zone: "sim-a", Price: "0.01"}},
			}},
		},
	}
	pool := &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
				NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.Group, Kind: "TofuNodeClass", Name: class.Name},
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}},
			}},
			Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: karpv1.MustParseNillableDuration("5s")},
		},
	}
	for _, o := range []client.Object{class, pool} {
		if err := kube.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	if err := devenv.Poll(ctx, time.Minute, 500*time.Millisecond, "the nodeclass to be Ready", func(ctx context.Context) (bool, error) {
		return devenv.NodeClassReady(ctx, kube, class.Name)
	}); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("burst-%d", i)
		if err := kube.Create(ctx, devenv.Workload(name, "bench", burstClaims, "1500m")); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := devenv.Poll(ctx, 15*time.Minute, time.Second, "every pod to be bound", func(ctx context.Context) (bool, error) {
			return devenv.PodsBound(ctx, kube, "default", map[string]string{"app": name}, burstClaims)
		}); err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		b.StopTimer()
		report(b, ctx, kube, wall)
		_ = kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
		if err := devenv.Poll(ctx, 10*time.Minute, time.Second, "consolidation to destroy every machine", func(ctx context.Context) (bool, error) {
			ok, _, err := devenv.Drained(ctx, kube)
			return ok, err
		}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// report reads the claims' runs and stages and reports runs per minute and medians.
func report(b *testing.B, ctx context.Context, kube client.Client, wall time.Duration) {
	list := &v1alpha1.FulfillmentList{}
	if err := kube.List(ctx, list); err != nil {
		b.Fatal(err)
	}
	var first, last time.Time
	var applies, ready []time.Duration
	runs := 0
	for _, f := range list.Items {
		for _, r := range f.Status.Runs {
			if r.Operation != string(tfrunner.Apply) || r.Phase != v1alpha1.RunSucceeded || r.StartTime == nil || r.CompletionTime == nil {
				continue
			}
			runs++
			applies = append(applies, r.CompletionTime.Sub(r.StartTime.Time))
			if first.IsZero() || r.StartTime.Before(&metav1.Time{Time: first}) {
				first = r.StartTime.Time
			}
			if r.CompletionTime.After(last) {
				last = r.CompletionTime.Time
			}
		}
		if st := f.Status.Stages; st.ClaimCreated != nil && st.Initialized != nil {
			ready = append(ready, st.Initialized.Sub(st.ClaimCreated.Time))
		}
	}
	if runs < burstClaims {
		b.Fatalf("%d successful applies for %d claims", runs, burstClaims)
	}
	span := last.Sub(first)
	sort.Slice(applies, func(i, j int) bool { return applies[i] < applies[j] })
	b.ReportMetric(float64(runs)/span.Minutes(), "runs/min")
	b.ReportMetric(median(applies).Seconds(), "apply-median-s")
	b.ReportMetric(median(ready).Seconds(), "claim-to-initialized-median-s")
	b.ReportMetric(wall.Seconds(), "all-bound-s")
	b.Logf("%d applies from %s to %s (%s): %.1f runs/min; apply runs min %s median %s max %s; claim→Initialized median %s; all pods bound after %s",
		runs, first.Format(time.TimeOnly), last.Format(time.TimeOnly), span, float64(runs)/span.Minutes(),
		applies[0], median(applies), applies[len(applies)-1], median(ready), wall.Round(time.Second))
}
