// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// startHcloud starts a Hetzner Cloud API stand-in in the test process whose servers boot
// simulated machines (the environment's binary), which join the environment's cluster. The
// runner pods on the stand-in kubelet reach it on loopback.
func startHcloud(t *testing.T) *standin.StandIn {
	t.Helper()
	log := &testenv.SyncBuffer{}
	api := standin.StartT(t, standin.Options{
		CreateDuration: 500 * time.Millisecond, ActionDuration: 200 * time.Millisecond, Log: log,
		Machines: &standin.SimMachines{Dir: t.TempDir(), Binary: sim.CommandBeside(env.bin), StopGrace: 5 * time.Second},
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hcloud stand-in log:\n%s", log.String())
		}
	})
	return api
}

// hcloudClass is a class of modules/hetzner-cloud as examples/hetzner-cloud has it, without
// the network, firewall and placement group, with its credentials from the Secret secret.
func hcloudClass(name, secret string, types ...v1alpha1.NodeType) *v1alpha1.TofuNodeClass {
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:      v1alpha1.FamilyHcloud,
			Module:      v1alpha1.ModuleSource{Source: filepath.Join(env.vars["MODULES"], "hetzner-cloud"), Version: "e2e"},
			Credentials: []v1alpha1.CredentialsSource{{SecretName: secret}},
			Bootstrap:   v1alpha1.BootstrapSpec{APIServerEndpoint: env.vars["API_SERVER"], TokenTTL: metav1.Duration{Duration: 15 * time.Minute}},
			Variables:   map[string]string{"image": "ubuntu-24.04"},
			NodeTypes:   types,
		},
	}
}

// hcloudType is a Hetzner Cloud server type of 2 cores and 4 GB (cx23's size) with offerings
// zone=price.
func hcloudType(name string, offerings ...string) v1alpha1.NodeType {
	nt := v1alpha1.NodeType{
		Name:     name,
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("3800Mi")},
		Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("300Mi")},
	}
	for _, o := range offerings {
		zone, price, _ := strings.Cut(o, "=")
		nt.Offerings = append(nt.Offerings, v1alpha1.Offering{Zone: zone, Price: price})
	}
	return nt
}

func hcloudSecret(name string, data map[string]string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: name, Labels: map[string]string{v1alpha1.LabelCredentials: "true"}}, StringData: data}
}

// classCondition waits until the class's condition has status and reason, and returns it.
func classCondition(t *testing.T, ctx context.Context, class, condition string, want metav1.ConditionStatus, reason string) *status.Condition {
	t.Helper()
	var got *status.Condition
	eventually(t, ctx, 2*time.Minute, fmt.Sprintf("class %s: %s=%s %s", class, condition, want, reason), func(ctx context.Context) (bool, error) {
		nc := &v1alpha1.TofuNodeClass{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: class}, nc); err != nil {
			return false, err
		}
		got = nc.StatusConditions().Get(condition)
		return got != nil && got.Status == want && got.Reason == reason, nil
	})
	return got
}

// eventFor waits for an event of reason about the named object of kind.
func eventFor(t *testing.T, ctx context.Context, kind, name, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	eventually(t, ctx, time.Minute, fmt.Sprintf("a %s event of %s %s", reason, kind, name), func(ctx context.Context) (bool, error) {
		list := &corev1.EventList{}
		if err := env.kube.List(ctx, list); err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Reason == reason {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// TestHcloud: the Hetzner Cloud family end to end on the real module and provider, against
// the API stand-in. A class whose token is missing or refused buys nothing and says why; a
// class whose module has no provider_id output says so. With a good token, a pending pod
// gets a node after Karpenter re-plans past an unknown server type, a wrong location and a
// sold-out offering, each a precise condition and event on its claim and no server; the
// server carries the claim's labels and a JoinConfiguration as its user data, the node
// registers as hcloud://<server id> and Karpenter links it to its claim; the run log is
// readable with kubectl logs. Scale to zero while the API refuses every delete: the destroy
// fails past the claim's run history and nothing is given up; once the API recovers, the
// server and its state are deleted, and nothing else.
func TestHcloud(t *testing.T) {
	ctx := ctxFor(t, 15*time.Minute)
	api := startHcloud(t)
	const class, pool, app = "e2e-hcloud", "e2e-hcloud", "hcloud"
	cleanupHcloud := func() { cleanup(t, app, pool, class) }

	// A module output without provider_id: the class is not Ready, no run is made.
	broken := t.TempDir()
	for _, f := range []string{"main.tf", "variables.tf", "versions.tf"} {
		data, err := os.ReadFile(filepath.Join(env.vars["MODULES"], "hetzner-cloud", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(broken, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	noOutput := hcloudClass("e2e-hcloud-no-output", "e2e-hcloud", hcloudType("cx23", "fsn1=0.0056"))
	noOutput.Spec.Module.Source = broken
	create(t, ctx, noOutput)
	c := classCondition(t, ctx, noOutput.Name, v1alpha1.ConditionModuleValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidModule)
	if !strings.Contains(c.Message, "provider_id") {
		t.Errorf("ModuleValid message %q does not name provider_id", c.Message)
	}
	eventFor(t, ctx, "TofuNodeClass", noOutput.Name, v1alpha1.ReasonInvalidModule)
	if err := env.kube.Delete(ctx, noOutput); err != nil {
		t.Fatal(err)
	}

	// No token in the credentials, then one the API refuses: the class is not Ready and
	// nothing is bought while pods wait.
	secret := hcloudSecret("e2e-hcloud", map[string]string{"HCLOUD_ENDPOINT": api.Endpoint()})
	create(t, ctx, secret,
		hcloudClass(class, secret.Name,
			hcloudType("cx99", "fsn1=0.0010"),  // no such server type: the provider refuses it
			hcloudType("cx43", "mars1=0.0020"), // no such location: the API refuses it
			hcloudType("cx23", "fsn1=0.0056", "nbg1=0.0060"),
			hcloudType("cx33", "fsn1=0.0088")),
		nodePool(pool, class))
	t.Cleanup(func() { _ = env.kube.Delete(context.Background(), secret) })
	c = classCondition(t, ctx, class, v1alpha1.ConditionCredentialsReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidCredentials)
	if want := "no HCLOUD_TOKEN (the Hetzner Cloud API token) in the class's credentials (secret e2e-hcloud)"; c.Message != want {
		t.Errorf("CredentialsReady message %q, want %q", c.Message, want)
	}
	eventFor(t, ctx, "TofuNodeClass", class, v1alpha1.ReasonInvalidCredentials)
	wrong := strings.Repeat("x", len(api.Token()))
	secret.StringData = map[string]string{"HCLOUD_ENDPOINT": api.Endpoint(), "HCLOUD_TOKEN": wrong}
	if err := env.kube.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	create(t, ctx, deployment(app, pool, 1, "500m"))
	eventually(t, ctx, time.Minute, "the class to report the refused token", func(ctx context.Context) (bool, error) {
		nc := &v1alpha1.TofuNodeClass{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: class}, nc); err != nil {
			return false, err
		}
		c = nc.StatusConditions().Get(status.ConditionReady)
		return c != nil && c.IsFalse() && strings.Contains(c.Message, "refused"), nil
	})
	if want := "the Hetzner Cloud API refused the class's HCLOUD_TOKEN: unable to authenticate (unauthorized, HTTP 401)"; c.Reason != v1alpha1.ReasonInvalidCredentials || c.Message != want {
		t.Errorf("Ready = %s %q, want %s %q", c.Reason, c.Message, v1alpha1.ReasonInvalidCredentials, want)
	}
	// Karpenter batches pending pods for up to 10s; give it that and more.
	time.Sleep(15 * time.Second)
	if ffs := fulfillments(t, ctx); len(ffs) != 0 {
		t.Fatalf("%d machines were bought for a class whose token the API refuses", len(ffs))
	}
	for _, r := range api.Requests() {
		if r.Method != "GET" || r.Status != 401 && r.Status != 200 {
			t.Errorf("before the token was good the API saw %s", r)
		}
	}

	// A good token, and the cheapest offering that exists sold out.
	api.SetStockout("cx23", "fsn1", true)
	tr := trackFulfillments(t)
	secret.StringData = map[string]string{"HCLOUD_ENDPOINT": api.Endpoint(), "HCLOUD_TOKEN": api.Token()}
	if err := env.kube.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, 8*time.Minute, "the pod to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": app}, 1)
	})
	// Each refused offering was tried once, failed with a precise reason and event, and left
	// no server.
	for _, tc := range []struct{ nodeType, zone, reason, message string }{
		{"cx99", "fsn1", "InvalidModule", "server type cx99 not found"},
		{"cx43", "mars1", "InvalidModule", "invalid input in field 'location'"},
		{"cx23", "fsn1", "InsufficientCapacity", "(resource_unavailable"},
	} {
		var tried []*v1alpha1.Fulfillment
		for _, f := range tr.byType(tc.nodeType) {
			if f.Spec.Zone == tc.zone {
				tried = append(tried, f)
			}
		}
		if len(tried) != 1 {
			t.Errorf("%d claims tried %s in %s, want 1", len(tried), tc.nodeType, tc.zone)
			continue
		}
		eventually(t, ctx, 2*time.Minute, "the failed claim "+tried[0].Name+" to be gone", func(ctx context.Context) (bool, error) {
			err := env.kube.Get(ctx, client.ObjectKeyFromObject(tried[0]), &v1alpha1.Fulfillment{})
			return err != nil, client.IgnoreNotFound(err)
		})
		f := tr.byName(tried[0].Name)
		applied := f.StatusConditions().Get(v1alpha1.ConditionApplied)
		if applied == nil || !applied.IsFalse() || applied.Reason != tc.reason || !strings.Contains(applied.Message, tc.message) {
			t.Errorf("%s in %s: Applied = %+v, want False %s with %q", tc.nodeType, tc.zone, applied, tc.reason, tc.message)
		}
		eventFor(t, ctx, "Fulfillment", f.Name, tc.reason)
	}
	servers := api.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers, want 1: %+v", len(servers), servers)
	}
	srv := servers[0]
	ffs := fulfillments(t, ctx)
	if len(ffs) != 1 {
		t.Fatalf("%d fulfillments, want 1", len(ffs))
	}
	f := &ffs[0]
	if f.Spec.NodeType != "cx23" || f.Spec.Zone != "nbg1" || srv.ServerType != "cx23" || srv.Location != "nbg1" {
		t.Errorf("claim %s/%s, server %s/%s; want cx23 in nbg1, the next cheapest offering", f.Spec.NodeType, f.Spec.Zone, srv.ServerType, srv.Location)
	}
	// The server as the API received it: the claim's labels and a JoinConfiguration.
	for k, v := range map[string]string{"fulfiller.sh/cluster": devenv.ClusterName, "fulfiller.sh/node": f.Name, "fulfiller.sh/node-type": "cx23", "karpenter.sh/nodepool": pool} {
		if srv.Labels[k] != v {
			t.Errorf("server label %s = %q, want %q (labels %v)", k, srv.Labels[k], v, srv.Labels)
		}
	}
	jc, err := bootstrap.ParseUserData(srv.UserData)
	if err != nil {
		t.Fatalf("the server's user data is no JoinConfiguration: %v", err)
	}
	token := tokenOf(t, ctx, f)
	if jc.Discovery.BootstrapToken == nil || jc.Discovery.BootstrapToken.Token != token {
		t.Error("the server's user data does not carry the claim's bootstrap token")
	}
	// The node registered as hcloud://<server id>, and Karpenter linked it to the claim.
	eventually(t, ctx, 2*time.Minute, "the fulfillment to be Ready", func(ctx context.Context) (bool, error) {
		return devenv.FulfillmentsReady(ctx, env.kube)
	})
	want := fmt.Sprintf("hcloud://%d", srv.ID)
	claim := &karpv1.NodeClaim{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: f.Name}, claim); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: claim.Status.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	if node.Spec.ProviderID != want || claim.Status.ProviderID != want {
		t.Errorf("node %s providerID %q, claim %q; want %s", node.Name, node.Spec.ProviderID, claim.Status.ProviderID, want)
	}
	for _, cond := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized} {
		if !claim.StatusConditions().IsTrue(cond) {
			t.Errorf("nodeclaim %s: %s is not True", claim.Name, cond)
		}
	}
	// The state, written by the runner pod, carries its claim's UID: finalize and the orphan
	// collector find it by it.
	key, err := statelock.KeyFor(f.Name)
	if err != nil {
		t.Fatal(err)
	}
	state := &corev1.Secret{}
	if err := env.kube.Get(ctx, client.ObjectKey{Namespace: devenv.StateNamespace, Name: key.SecretName()}, state); err != nil {
		t.Fatalf("the state of %s: %v", f.Name, err)
	}
	if got := state.Labels[keys.LabelNodeClaimUID]; got != string(claim.UID) {
		t.Errorf("state %s label %s = %q, want the claim's UID %s", state.Name, keys.LabelNodeClaimUID, got, claim.UID)
	}
	// The run log, as kubectl logs shows it, and no token anywhere but the user data.
	ready := &v1alpha1.Fulfillment{}
	if err := env.kube.Get(ctx, client.ObjectKeyFromObject(f), ready); err != nil {
		t.Fatal(err)
	}
	runLog := runLog(t, ready.Status.Runs[len(ready.Status.Runs)-1])
	if !strings.Contains(runLog, `"type":"apply_complete"`) || !strings.Contains(runLog, "hcloud_server.node") {
		t.Errorf("the run log shows no completed apply of hcloud_server.node:\n%s", runLog)
	}
	secretHalf := strings.SplitN(token, ".", 2)[1]
	if strings.Contains(runLog, secretHalf) || strings.Contains(runLog, api.Token()) {
		t.Error("the run log holds the bootstrap token or the API token")
	}
	assertTokenNowhere(t, ctx, ready, secretHalf)
	assertTokenNowhere(t, ctx, ready, api.Token())

	// Scale to zero while the API refuses every server delete (issue 25, defect 1): the destroy
	// fails more often than the claim's run history keeps runs, and the claim is not given up:
	// the server, the state and the Fulfillment stay. Once the API recovers, the server and
	// the state are deleted, and nothing else.
	api.Fail(standin.Failure{Times: 1 << 30, Method: http.MethodDelete, PathPrefix: "/servers", Code: "forbidden", Status: http.StatusForbidden})
	refusing := time.Now()
	scale(t, ctx, app, 0)
	const pastHistory = 12 // the status keeps 10 runs: the apply and 9 destroys
	eventually(t, ctx, 6*time.Minute, fmt.Sprintf("%d destroys of %s to fail", pastHistory, f.Name), func(ctx context.Context) (bool, error) {
		got := &v1alpha1.Fulfillment{}
		if err := env.kube.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			return false, fmt.Errorf("the claim was given up while its destroy failed: %w", err)
		}
		if got.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed) {
			return false, fmt.Errorf("the claim says Destroyed while every delete was refused")
		}
		if _, ok := api.Server(srv.ID); !ok {
			return false, fmt.Errorf("server %d is gone while every delete was refused", srv.ID)
		}
		if err := env.kube.Get(ctx, client.ObjectKey{Namespace: devenv.StateNamespace, Name: key.SecretName()}, &corev1.Secret{}); err != nil {
			return false, fmt.Errorf("the state of %s while its destroy fails: %w", f.Name, err)
		}
		last := got.Status.Runs[len(got.Status.Runs)-1]
		return last.Operation == string(tfrunner.Destroy) && last.Attempt >= pastHistory && last.Phase == v1alpha1.RunFailed, nil
	})
	t.Logf("%d destroys refused in %s", pastHistory, time.Since(refusing).Round(time.Second))
	api.ClearFailures()
	eventually(t, ctx, 4*time.Minute, "the destroy to delete the server and remove its state once the API recovers", func(ctx context.Context) (bool, error) {
		ok, _, err := devenv.Drained(ctx, env.kube)
		return ok, err
	})
	if servers := api.Servers(); len(servers) != 0 {
		t.Errorf("servers left after scale to zero: %+v", servers)
	}
	if err := env.kube.Get(ctx, client.ObjectKey{Namespace: devenv.StateNamespace, Name: key.SecretName()}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the state of %s after its destroy: %v, want it removed", f.Name, err)
	}
	for _, r := range api.Requests() {
		if r.Method == http.MethodDelete && r.Path != fmt.Sprintf("/servers/%d", srv.ID) {
			t.Errorf("the destroy of %s touched something else: %s %s", f.Name, r.Method, r.Path)
		}
	}
	cleanupHcloud()
}

// TestHcloudOrphansAndPrices: what the Hetzner Cloud family's inventory and catalogue do
// through the real controller and Karpenter.
//
// Orphans: a runner is killed the moment the API has answered its server create, before tofu
// could write the server into the state, and the claim is deleted: the claim, its
// Fulfillment and its state go, the server stays (nothing knows it). The orphan collector
// deletes it once it is older than the grace period (FULFILLER_ORPHAN_GRACE, a minute here),
// with an event on its class naming it. A server labelled as another cluster's and a server
// with no labels, made in the same project, are never deleted.
//
// Prices, meanwhile: a class whose node types come from the catalogue (spec.catalog, read
// every minute) puts a pending pod on the cheapest fitting offering, cx23; once the API's
// price of cx23 rises above cax11's, the next refresh changes the class's prices and a new
// pod lands on cax11.
func TestHcloudOrphansAndPrices(t *testing.T) {
	ctx := ctxFor(t, 15*time.Minute)
	api := startHcloud(t)
	const orphanClass, orphanPool, orphanApp = "e2e-hcloud-orphan", "e2e-hcloud-orphan", "hcloud-orphan"
	const priceClass, pricePool, priceApp = "e2e-hcloud-prices", "e2e-hcloud-prices", "hcloud-prices"
	cs := clientset(t)

	// Servers of the same project the collector must never touch: one of another cluster
	// (labelled as a claim of this class would be), one with no labels.
	foreign := createServerDirectly(t, api, "other-cluster-node", map[string]string{
		keys.LabelCluster: "other-cluster", keys.LabelNodeClaim: "gone-claim",
		keys.LabelNodeClass: orphanClass, "fulfiller.sh/node": "gone-claim", karpv1.NodePoolLabelKey: orphanPool,
	})
	unlabelled := createServerDirectly(t, api, "hand-made", nil)
	const orphansDeleted, hcloudMachines = "fulfiller_orphans_deleted_total", `family="hcloud",kind="machine"`
	deletedBefore := metricValue(t, orphansDeleted, hcloudMachines)

	// The first server of the orphan pool: its runner is killed as soon as the create is
	// answered, then its pod and its claim are deleted.
	type orphan struct {
		server     standin.Server
		claim, run string
		err        error
	}
	orphaned := make(chan orphan, 1)
	var once sync.Once
	api.AfterCreate(func(srv standin.Server) {
		if srv.Labels[karpv1.NodePoolLabelKey] != orphanPool || srv.Labels[keys.LabelCluster] != devenv.ClusterName {
			return
		}
		once.Do(func() {
			o := orphan{server: srv, claim: srv.Labels[keys.LabelNodeClaim]}
			o.run, o.err = killApply(ctx, cs, o.claim)
			if o.err == nil {
				o.err = errors.Join(
					client.IgnoreNotFound(env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: orphanApp}})),
					env.kube.Delete(ctx, &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: o.claim}}))
			}
			orphaned <- o
		})
	})

	secret := hcloudSecret("e2e-hcloud-orphans", map[string]string{"HCLOUD_ENDPOINT": api.Endpoint(), "HCLOUD_TOKEN": api.Token()})
	create(t, ctx, secret)
	t.Cleanup(func() { _ = env.kube.Delete(context.Background(), secret) })
	// cx23 in nbg1 for the orphan, the catalogue in hel1 for the prices: the controller marks
	// an offering that failed unavailable for minutes, whatever its class, so the prices use
	// a location neither the killed claim nor TestHcloud (cx23 sold out in fsn1) tried.
	startScenario(t, ctx, hcloudClass(orphanClass, secret.Name, hcloudType("cx23", "nbg1=0.0056")), nodePool(orphanPool, orphanClass))
	prices := hcloudClass(priceClass, secret.Name)
	prices.Spec.Catalog = &v1alpha1.Catalog{
		Select:          []v1alpha1.TypeSelector{{Names: []string{"cx23", "cax11", "cx33"}}},
		Zones:           []string{"hel1"},
		RefreshInterval: &metav1.Duration{Duration: time.Minute},
	}
	pool := nodePool(pricePool, priceClass)
	// Consolidation would replace the cx23 node by a cheaper one once prices change.
	pool.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	startScenario(t, ctx, prices, pool)
	t.Cleanup(func() {
		cleanup(t, priceApp, pricePool, priceClass)
		cleanup(t, orphanApp, orphanPool, orphanClass)
	})

	create(t, ctx, deployment(orphanApp, orphanPool, 1, "500m"))
	var o orphan
	select {
	case o = <-orphaned:
	case <-time.After(5 * time.Minute):
		t.Fatal("no server of the orphan pool was created within 5 minutes")
	}
	if o.err != nil {
		t.Fatalf("killing the apply of %s after server %d was created: %v", o.claim, o.server.ID, o.err)
	}
	t.Logf("killed run %s of claim %s right after the API created server %s (%d)", o.run, o.claim, o.server.Name, o.server.ID)
	key, err := statelock.KeyFor(o.claim)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, 4*time.Minute, "the claim "+o.claim+", its Fulfillment and its state to be gone", func(ctx context.Context) (bool, error) {
		for _, obj := range []client.Object{&karpv1.NodeClaim{}, &v1alpha1.Fulfillment{}} {
			if err := env.kube.Get(ctx, client.ObjectKey{Name: o.claim}, obj); !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		exists, err := statelock.Exists(ctx, env.kube, devenv.StateNamespace, key)
		return !exists, err
	})
	if _, ok := api.Server(o.server.ID); !ok {
		t.Fatalf("server %d is gone with its claim: the kill came too late to orphan it", o.server.ID)
	}
	t.Logf("claim %s destroyed without its server, %s after the server's creation", o.claim, time.Since(o.server.Created).Round(time.Second))

	// Prices, while the orphan ages: the cheapest offering first.
	create(t, ctx, deployment(priceApp, pricePool, 1, "1500m"))
	eventually(t, ctx, 4*time.Minute, "the first price pod to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": priceApp}, 1)
	})
	first := poolFulfillments(t, ctx, pricePool)
	if len(first) != 1 || first[0].Spec.NodeType != "cx23" || first[0].Spec.Zone != "hel1" {
		t.Fatalf("price pool claims %v, want one cx23 in hel1 (0.0056, the cheapest of cx23, cax11 0.0064 and cx33 0.0088)", describeClaims(first))
	}
	nc := &v1alpha1.TofuNodeClass{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: priceClass}, nc); err != nil {
		t.Fatal(err)
	}
	before := nc.Status.Catalog.Refreshed.Time
	if !api.SetPrice("cx23", "hel1", 0.0099) {
		t.Fatal("the stand-in has no cx23 price in hel1")
	}
	raised := time.Now()
	eventually(t, ctx, 2*time.Minute, "the class to read cx23's new price", func(ctx context.Context) (bool, error) {
		if err := env.kube.Get(ctx, client.ObjectKey{Name: priceClass}, nc); err != nil {
			return false, err
		}
		nt, ok := nc.NodeType("cx23")
		if !ok || len(nt.Offerings) != 1 {
			return false, nil
		}
		price, err := strconv.ParseFloat(nt.Offerings[0].Price, 64)
		return err == nil && price > 0.0064, nil
	})
	took := time.Since(raised)
	t.Logf("cx23's new price reached the class %s after it was raised (read %s after the previous read)",
		took.Round(time.Second), nc.Status.Catalog.Refreshed.Sub(before))
	if took > time.Minute+15*time.Second {
		t.Errorf("cx23's new price reached the class %s after it was raised, want within one refresh interval (1m)", took)
	}
	// The catalogue's reads and age, and the project's API budget the runs and reads drew on.
	m := scrape(t)
	inPriceClass := fmt.Sprintf(`class=%q`, priceClass)
	if reads, _ := sumOf(m, "fulfiller_catalog_reads_total", inPriceClass, `family="hcloud"`, `result="Succeeded"`); reads < 2 {
		t.Errorf("fulfiller_catalog_reads_total{class=%s,result=Succeeded} = %v, want at least 2 (the first read and the one that saw the new price)", priceClass, reads)
	}
	if age, n := sumOf(m, "fulfiller_catalog_age_seconds", inPriceClass, `family="hcloud"`); n != 1 || age > 2*60 {
		t.Errorf("fulfiller_catalog_age_seconds{class=%s} = %v (%d series), want one below twice the refresh interval (1m)", priceClass, age, n)
	}
	// (One series per project: each test's stand-in is a project of its own, and a budget
	// has a series once a run or a request drew on it. It regains 3600 requests an hour, one
	// a second, so a few seconds after the last draw it is whole again: what is left is
	// bounded by the limit, not below it.)
	left, projects := sumOf(m, "fulfiller_api_budget_requests_left", `budget="the Hetzner Cloud project of token `)
	if projects == 0 || left <= 0 || left > float64(3600*projects) {
		t.Errorf("fulfiller_api_budget_requests_left of the Hetzner Cloud projects = %v (%d series), want a series for each project the runs drew on, each above 0 and at most the hourly 3600", left, projects)
	}
	if limit, n := sumOf(m, "fulfiller_api_budget_requests_limit", `budget="the Hetzner Cloud project of token `, `period="hour"`); n != projects || limit != float64(3600*n) {
		t.Errorf("fulfiller_api_budget_requests_limit of the Hetzner Cloud projects = %v (%d series), want 3600 per hour each of %d", limit, n, projects)
	}
	scale(t, ctx, priceApp, 2)
	eventually(t, ctx, 4*time.Minute, "the second price pod to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": priceApp}, 2)
	})
	var second []v1alpha1.Fulfillment
	for _, f := range poolFulfillments(t, ctx, pricePool) {
		if f.Name != first[0].Name {
			second = append(second, f)
		}
	}
	if len(second) != 1 || second[0].Spec.NodeType != "cax11" || second[0].Spec.Zone != "hel1" {
		t.Errorf("new claims after cx23's price rose: %v, want one cax11 in hel1 (0.0064, now the cheapest)", describeClaims(second))
	}

	// The orphan: deleted once older than the grace period, with an event naming it.
	eventually(t, ctx, 4*time.Minute, fmt.Sprintf("the orphaned server %d to be deleted", o.server.ID), func(ctx context.Context) (bool, error) {
		_, ok := api.Server(o.server.ID)
		return !ok, nil
	})
	var deleted time.Time
	for _, r := range api.Requests() {
		switch {
		case r.Method == "DELETE" && r.Path == fmt.Sprintf("/servers/%d", o.server.ID):
			deleted = r.Time
		case r.Method == "DELETE" && (r.Path == fmt.Sprintf("/servers/%d", foreign.ID) || r.Path == fmt.Sprintf("/servers/%d", unlabelled.ID)):
			t.Errorf("the API saw %s", r)
		}
	}
	if deleted.IsZero() {
		t.Fatalf("server %d is gone, but the API's log has no DELETE of it", o.server.ID)
	}
	age := deleted.Sub(o.server.Created)
	t.Logf("orphaned server %d deleted %s after its creation (grace %s)", o.server.ID, age.Round(time.Second), devenv.OrphanGrace)
	if age < devenv.OrphanGrace {
		t.Errorf("the orphaned server was deleted %s after its creation, before the grace period (%s)", age, devenv.OrphanGrace)
	}
	ev := eventFor(t, ctx, "TofuNodeClass", orphanClass, v1alpha1.ReasonOrphanMachineDeleted)
	if !strings.Contains(ev.Message, o.server.Name) || !strings.Contains(ev.Message, strconv.FormatInt(o.server.ID, 10)) || !strings.Contains(ev.Message, o.claim) {
		t.Errorf("event %q does not name server %s (%d) of claim %s", ev.Message, o.server.Name, o.server.ID, o.claim)
	}
	if n := metricValue(t, orphansDeleted, hcloudMachines) - deletedBefore; n != 1 {
		t.Errorf("%s{%s} rose by %v, want 1", orphansDeleted, hcloudMachines, n)
	}
	// Its machine may have joined before its claim went (and registered its Node again after
	// Karpenter deleted it): with no cloud-controller-manager, the collector deletes that Node.
	orphanID := fmt.Sprintf("hcloud://%d", o.server.ID)
	eventually(t, ctx, 3*time.Minute, "no Node of the orphaned server "+orphanID, func(ctx context.Context) (bool, error) {
		nodes := &corev1.NodeList{}
		if err := env.kube.List(ctx, nodes); err != nil {
			return false, err
		}
		return !slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool { return n.Spec.ProviderID == orphanID }), nil
	})
	for _, srv := range []standin.Server{foreign, unlabelled} {
		if _, ok := api.Server(srv.ID); !ok {
			t.Errorf("server %s (%d, labels %v) was deleted", srv.Name, srv.ID, srv.Labels)
		}
	}
	servers := 0
	for _, srv := range api.Servers() {
		if srv.Labels[karpv1.NodePoolLabelKey] == orphanPool && srv.Labels[keys.LabelCluster] == devenv.ClusterName {
			servers++
		}
	}
	if servers != 0 {
		t.Errorf("%d servers of the orphan pool left", servers)
	}
}

// killApply kills the running apply of a claim (its latest run).
func killApply(ctx context.Context, cs kubernetes.Interface, claim string) (string, error) {
	f := &v1alpha1.Fulfillment{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: claim}, f); err != nil {
		return "", err
	}
	for i := len(f.Status.Runs) - 1; i >= 0; i-- {
		if run := f.Status.Runs[i]; run.Operation == string(tfrunner.Apply) {
			return run.Name, killRun(ctx, cs, run.Name)
		}
	}
	return "", fmt.Errorf("fulfillment %s shows no apply", claim)
}

// createServerDirectly creates a server through the stand-in's API, as a person or another
// cluster's tooling would: stopped, it boots no machine.
func createServerDirectly(t *testing.T, api *standin.StandIn, name string, labels map[string]string) standin.Server {
	t.Helper()
	body, err := json.Marshal(map[string]any{"name": name, "server_type": "cx23", "image": "ubuntu-24.04", "location": "fsn1",
		"start_after_create": false, "labels": labels})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, api.Endpoint()+"/servers", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+api.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Server struct {
			ID int64 `json:"id"`
		} `json:"server"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating server %s: HTTP %d, %v", name, resp.StatusCode, err)
	}
	srv, ok := api.Server(out.Server.ID)
	if !ok {
		t.Fatalf("server %s (%d) is not in the stand-in", name, out.Server.ID)
	}
	return srv
}

// poolFulfillments are the Fulfillments of a NodePool's claims.
func poolFulfillments(t *testing.T, ctx context.Context, pool string) []v1alpha1.Fulfillment {
	t.Helper()
	var out []v1alpha1.Fulfillment
	for _, f := range fulfillments(t, ctx) {
		if f.Spec.NodePool == pool {
			out = append(out, f)
		}
	}
	return out
}

func describeClaims(ffs []v1alpha1.Fulfillment) []string {
	var out []string
	for _, f := range ffs {
		out = append(out, f.Name+" "+f.Spec.NodeType+"/"+f.Spec.Zone)
	}
	return out
}

// TestHcloudVolumeTopology: a pod whose volume the Hetzner Cloud CSI driver pinned to a
// location (a PersistentVolume's node affinity on csi.hetzner.cloud/location) gets a node in
// that location, not in a cheaper one: Karpenter reads the label as the zone. The Node is born
// with the label, so the scheduler binds the pod before any CSI node plugin would label it.
func TestHcloudVolumeTopology(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	api := startHcloud(t)
	const class, pool, app, volume = "e2e-hcloud-volume", "e2e-hcloud-volume", "hcloud-volume", "e2e-hcloud-volume"
	secret := hcloudSecret("e2e-hcloud-volume", map[string]string{"HCLOUD_ENDPOINT": api.Endpoint(), "HCLOUD_TOKEN": api.Token()})
	create(t, ctx, secret)
	t.Cleanup(func() { _ = env.kube.Delete(context.Background(), secret) })
	startScenario(t, ctx, hcloudClass(class, secret.Name, hcloudType("cx23", "fsn1=0.0050", "hel1=0.0052", "nbg1=0.0090")), nodePool(pool, class))
	t.Cleanup(func() {
		cleanup(t, app, pool, class)
		if servers := api.Servers(); len(servers) != 0 {
			t.Errorf("servers left: %+v", servers)
		}
	})

	// A volume as the CSI driver provisions one in nbg1, and its claim bound to it.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: volume},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "csi.hetzner.cloud", VolumeHandle: "4711"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "csi.hetzner.cloud/location", Operator: corev1.NodeSelectorOpIn, Values: []string{"nbg1"}}},
			}}}},
			ClaimRef: &corev1.ObjectReference{Namespace: "default", Name: volume},
		},
	}
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: volume},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
			StorageClassName: &empty,
			VolumeName:       volume,
		},
	}
	create(t, ctx, pv, pvc)
	t.Cleanup(func() {
		_ = env.kube.Delete(context.Background(), pvc)
		_ = env.kube.Delete(context.Background(), pv)
	})
	eventually(t, ctx, time.Minute, "the volume's claim to be bound", func(ctx context.Context) (bool, error) {
		got := &corev1.PersistentVolumeClaim{}
		err := env.kube.Get(ctx, client.ObjectKeyFromObject(pvc), got)
		return err == nil && got.Status.Phase == corev1.ClaimBound, err
	})

	d := deployment(app, pool, 1, "500m")
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: volume}}}}
	d.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	create(t, ctx, d)
	var pod corev1.Pod
	eventually(t, ctx, 4*time.Minute, "the pod with the volume to be bound to a node", func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := env.kube.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": app}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	node := &corev1.Node{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	if node.Labels["csi.hetzner.cloud/location"] != "nbg1" || node.Labels[corev1.LabelTopologyZone] != "nbg1" {
		t.Errorf("node %s labels %v, want csi.hetzner.cloud/location and the zone nbg1", node.Name, node.Labels)
	}
	servers := api.Servers()
	if len(servers) != 1 || servers[0].Location != "nbg1" {
		t.Errorf("servers %+v, want one in nbg1, where the volume is", servers)
	}
	ffs := poolFulfillments(t, ctx, pool)
	if len(ffs) != 1 || ffs[0].Spec.Zone != "nbg1" {
		t.Errorf("claims %v, want one in nbg1", describeClaims(ffs))
	}
}
