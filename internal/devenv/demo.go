// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package devenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
)

// Client returns a client for the environment in dir.
func Client(dir string) (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", Layout{dir}.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return client.New(cfg, client.Options{Scheme: scheme.Scheme})
}

// ApplyFile server-side applies every object of a YAML file, after replacing ${VAR}s from vars.
func ApplyFile(ctx context.Context, c client.Client, path string, vars map[string]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	expanded := os.Expand(string(data), func(k string) string { return vars[k] })
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(expanded), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.ForceOwnership, client.FieldOwner("fulfiller-dev")); err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// Vars are the substitutions of the example manifests for the environment in dir.
func Vars(dir, modules string) (map[string]string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	server, err := os.ReadFile(Layout{dir}.ServerFile())
	if err != nil {
		return nil, fmt.Errorf("reading the API server address: %w", err)
	}
	modules, err = filepath.Abs(modules)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{"MODULES": modules, "SIM_DIR": Layout{dir}.Machines(), "API_SERVER": strings.TrimSpace(string(server))}
	if endpoint, err := os.ReadFile(Layout{dir}.HcloudFile()); err == nil {
		vars["HCLOUD_ENDPOINT"], vars["HCLOUD_TOKEN"] = strings.TrimSpace(string(endpoint)), standin.DefaultToken
	}
	return vars, nil
}

// Poll calls cond every interval until it is true, fails, or timeout passes.
func Poll(ctx context.Context, timeout, interval time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		case <-time.After(interval):
		}
	}
}

// NodeClassReady reports whether a TofuNodeClass is Ready.
func NodeClassReady(ctx context.Context, c client.Client, name string) (bool, error) {
	nc := &v1alpha1.TofuNodeClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, nc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return nc.StatusConditions().Root().IsTrue(), nil
}

// PodsBound reports whether every pod with these labels is bound to a node, and how many are.
func PodsBound(ctx context.Context, c client.Client, namespace string, labels map[string]string, want int) (bool, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
		return false, err
	}
	bound := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			bound++
		}
	}
	return bound == want && len(pods.Items) == want, nil
}

// Drained reports whether no NodeClaim, Karpenter Node, Fulfillment, state Secret or lock Lease is left.
func Drained(ctx context.Context, c client.Client) (bool, string, error) {
	counts := []struct {
		what string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"nodeclaims", &karpv1.NodeClaimList{}, nil},
		{"nodes", &corev1.NodeList{}, []client.ListOption{client.HasLabels{karpv1.NodePoolLabelKey}}}, // not the runner node
		{"fulfillments", &v1alpha1.FulfillmentList{}, nil},
		{"state secrets", &corev1.SecretList{}, []client.ListOption{client.InNamespace(StateNamespace), client.MatchingLabels{"tfstate": "true"}}},
		{"state leases", &coordinationv1.LeaseList{}, []client.ListOption{client.InNamespace(StateNamespace), client.MatchingLabels{"tfstate": "true"}}},
	}
	var left []string
	for _, cnt := range counts {
		if err := c.List(ctx, cnt.list, cnt.opts...); err != nil {
			return false, "", err
		}
		if names := namesOf(cnt.list); len(names) > 0 {
			left = append(left, fmt.Sprintf("%d %s (%s)", len(names), cnt.what, abbreviate(names, 5)))
		}
	}
	return len(left) == 0, strings.Join(left, ", "), nil
}

// namesOf lists the names of the list's objects.
func namesOf(list client.ObjectList) []string {
	var names []string
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok {
			names = append(names, obj.GetName())
		}
		return nil
	})
	return names
}

// abbreviate joins the first n names and says how many more there are.
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], " "), len(names)-n)
}

// StageRow is one claim's way from creation to a Ready node.
type StageRow struct {
	Claim, Type, Zone                              string
	ApplyStarted, Applied, Registered, Initialized time.Duration
}

// StageTimings reads each Fulfillment's stage timestamps, relative to its claim's creation.
func StageTimings(ctx context.Context, c client.Client) ([]StageRow, error) {
	list := &v1alpha1.FulfillmentList{}
	if err := c.List(ctx, list); err != nil {
		return nil, err
	}
	var rows []StageRow
	for _, f := range list.Items {
		st := f.Status.Stages
		if st.ClaimCreated == nil {
			continue
		}
		rel := func(ts *metav1.Time) time.Duration {
			if ts == nil {
				return -1
			}
			return ts.Sub(st.ClaimCreated.Time)
		}
		rows = append(rows, StageRow{
			Claim: f.Name, Type: f.Spec.NodeType, Zone: f.Spec.Zone,
			ApplyStarted: rel(st.ApplyStarted), Applied: rel(st.Applied),
			Registered: rel(st.Registered), Initialized: rel(st.Initialized),
		})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Claim < rows[j].Claim })
	return rows, nil
}

// PrintStageTimings writes the stage table.
func PrintStageTimings(w io.Writer, rows []StageRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLAIM\tTYPE\tZONE\tAPPLY STARTED\tAPPLIED\tREGISTERED\tINITIALIZED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Claim, r.Type, r.Zone, dur(r.ApplyStarted), dur(r.Applied), dur(r.Registered), dur(r.Initialized))
	}
	tw.Flush()
}

func dur(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return "+" + d.Round(100*time.Millisecond).String()
}

// DemoOptions configure the demo.
type DemoOptions struct {
	Dir      string
	Examples string // folder of nodeclass.yaml, nodepool.yaml, workload.yaml
	Modules  string // folder of the node-type modules
	Keep     bool   // leave the environment running
	Executor string // ExecutorLocal (default) or ExecutorJob
	// Hcloud runs the environment with its Hetzner Cloud API stand-in, and the demo's class
	// (hcloud, from Examples with its credentials.yaml) on modules/hetzner-cloud.
	Hcloud bool
	Out    io.Writer
}

// Demo runs the main job: pending pods get nodes through Karpenter, real tofu runs and real
// joins; then the workload goes away and consolidation destroys the nodes.
func Demo(ctx context.Context, o DemoOptions) (err error) {
	out := o.Out
	step := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
	start := time.Now()
	step("starting the local environment in %s", o.Dir)
	if err := Up(o.Dir, 5*time.Minute, cmp.Or(o.Executor, ExecutorLocal), o.Hcloud); err != nil {
		return err
	}
	if !o.Keep {
		defer func() {
			step("stopping the environment")
			if derr := Down(o.Dir, time.Minute); derr != nil && err == nil {
				err = derr
			}
		}()
	}
	step("environment ready after %s; kubeconfig: %s", time.Since(start).Round(time.Second), Layout{o.Dir}.Kubeconfig())
	c, err := Client(o.Dir)
	if err != nil {
		return err
	}
	vars, err := Vars(o.Dir, o.Modules)
	if err != nil {
		return err
	}
	class, files := "sim", []string{"nodeclass.yaml", "nodepool.yaml"}
	if o.Hcloud {
		class, files = "hcloud", append([]string{"credentials.yaml"}, files...)
		step("Hetzner Cloud API stand-in at %s; the class runs modules/hetzner-cloud with the real hcloud provider", vars["HCLOUD_ENDPOINT"])
	}
	for _, f := range files {
		if err := ApplyFile(ctx, c, filepath.Join(o.Examples, f), vars); err != nil {
			return err
		}
	}
	if err := Poll(ctx, time.Minute, 250*time.Millisecond, "nodeclass "+class+" to be Ready", func(ctx context.Context) (bool, error) {
		return NodeClassReady(ctx, c, class)
	}); err != nil {
		return err
	}
	step("nodeclass %s is Ready; applying the workload (6 pods that fit on no node)", class)
	if err := ApplyFile(ctx, c, filepath.Join(o.Examples, "workload.yaml"), vars); err != nil {
		return err
	}
	scaleUp := time.Now()
	if err := Poll(ctx, 5*time.Minute, time.Second, "every pod to be bound", func(ctx context.Context) (bool, error) {
		return PodsBound(ctx, c, "default", map[string]string{"app": "inflate"}, 6)
	}); err != nil {
		return err
	}
	step("all 6 pods bound after %s", time.Since(scaleUp).Round(100*time.Millisecond))
	if err := Poll(ctx, 2*time.Minute, time.Second, "every fulfillment to be Ready", func(ctx context.Context) (bool, error) {
		return FulfillmentsReady(ctx, c)
	}); err != nil {
		return err
	}
	rows, err := StageTimings(ctx, c)
	if err != nil {
		return err
	}
	step("per-claim stage timings (from claim creation):")
	PrintStageTimings(out, rows)
	step("scaling the workload to zero; waiting for consolidation to destroy the nodes")
	deploy := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "inflate"}, deploy); err != nil {
		return err
	}
	patch := client.MergeFrom(deploy.DeepCopy())
	deploy.Spec.Replicas = new(int32)
	if err := c.Patch(ctx, deploy, patch); err != nil {
		return err
	}
	scaleDown := time.Now()
	var left string
	if err := Poll(ctx, 5*time.Minute, time.Second, "nodes, claims and states to be gone", func(ctx context.Context) (bool, error) {
		ok, l, err := Drained(ctx, c)
		left = l
		return ok, err
	}); err != nil {
		return fmt.Errorf("%w (left: %s)", err, left)
	}
	step("nodes destroyed and states removed %s after scale-down", time.Since(scaleDown).Round(100*time.Millisecond))
	step("demo finished in %s", time.Since(start).Round(time.Second))
	return nil
}

// FulfillmentsReady reports whether every Fulfillment is Ready.
func FulfillmentsReady(ctx context.Context, c client.Client) (bool, error) {
	list := &v1alpha1.FulfillmentList{}
	if err := c.List(ctx, list); err != nil {
		return false, err
	}
	for i := range list.Items {
		if !list.Items[i].StatusConditions().Root().IsTrue() {
			return false, nil
		}
	}
	return len(list.Items) > 0, nil
}
