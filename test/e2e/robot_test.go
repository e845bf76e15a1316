// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/standin"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
)

const robotImage = "/root/.oldroot/nfs/images/Ubuntu-2404-noble-amd64-base.tar.gz"

// TestRobotPool: Hetzner Robot servers as node types, through the real controller and
// Karpenter, with the Robot webservice stand-in and simulated dedicated servers (a 20-minute
// install takes 2 seconds, a boot 0.2). The pool is what the class's discover entry (name
// prefix e2e-, product AX52) selects of the account, servers 901 and 902; 901 is also
// declared, with its own SSH address. The account also holds two servers outside the pool, running someone's database: db-903 (the
// pool's product) and e2e-904 (the prefix, another product). The pool keeper installs both
// pool servers ahead of need; the controller is killed while the keeper waits for 902's
// rescue system, and the restarted one installs 902 anew. The cold path (20 minutes) exceeds
// the registration window, so the class says the type is offered only while servers wait in
// standby. A burst of three pods gets two nodes, warm, registered as hrobot://<n>, each
// server leased to one claim; the third pod waits. The pods go away: the nodes are drained
// and deleted, the servers released, reinstalled in the background and back in standby, their
// states and leases clean. The controller is killed mid-activation: the claims keep their
// servers, no apply is repeated, and everything is released again. Throughout, the servers
// outside the pool get no request of any kind and have no lease.
func TestRobotPool(t *testing.T) {
	ctx := ctxFor(t, 16*time.Minute)
	api, err := standin.StartAPI(standin.APIConfig{User: "#ws+e2e", Password: "e2e robot password"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	timings := standin.RealTimings.Scale(600)
	timings.HeartbeatInterval = 2 * time.Second
	newServer := func(n int, name, product string) *standin.Server {
		srv, err := standin.NewServer(standin.ServerConfig{
			Number: n, Name: name, Product: product, DC: "FSN1-DC1", Timings: timings,
			Images: []string{robotImage}, StateDir: t.TempDir(),
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		api.AddServer(srv)
		return srv
	}
	declared, discovered := newServer(901, "e2e-901", "AX52"), newServer(902, "e2e-902", "AX52")
	// 902's boots wait until the controller has been killed while the keeper installs it.
	releaseBoots := discovered.HoldBoots()
	t.Cleanup(releaseBoots)
	// The servers outside the pool run a system that is not the fulfiller's, in use.
	var foreign []*standin.Server
	foreignEvents := map[int]int{}
	for _, f := range []struct {
		n             int
		name, product string
	}{{903, "db-903", "AX52"}, {904, "e2e-904", "AX102"}} {
		srv := newServer(f.n, f.name, f.product)
		_, ownerKey, err := robot.NewHostKey()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.InstallStandby(ownerKey); err != nil {
			t.Fatal(err)
		}
		foreign = append(foreign, srv)
	}
	for _, srv := range foreign {
		eventually(t, ctx, time.Minute, fmt.Sprintf("server %d outside the pool to run its system", srv.Number()), func(context.Context) (bool, error) {
			_, up := srv.State()
			return up, nil
		})
		srv.UseOutsidePool()
		foreignEvents[srv.Number()] = len(srv.Events())
	}
	keyPEM, _, err := robot.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	const class, pool, deploy = "robot-e2e", "robot-e2e", "robot-e2e"
	create(t, ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: "robot-e2e", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
		StringData: map[string]string{robot.EnvEndpoint: api.URL, robot.EnvUser: "#ws+e2e", robot.EnvPassword: "e2e robot password", robot.EnvSSHKey: string(keyPEM)},
	})
	warm := int32(2)
	nc := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family: v1alpha1.FamilyRobot,
			Robot: &v1alpha1.RobotPool{Warm: &warm,
				Servers: []v1alpha1.RobotServer{{Number: 901, NodeType: "ax52",
					SSHAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(declared.SSHPort()))}},
				Discover: []v1alpha1.RobotDiscovery{{NamePrefix: "e2e-", Product: "AX52", NodeType: "ax52"}}},
			Module:      v1alpha1.ModuleSource{Source: filepath.Join(env.vars["MODULES"], "hetzner-robot"), Version: "e2e"},
			Credentials: []v1alpha1.CredentialsSource{{SecretName: "robot-e2e"}},
			Bootstrap:   v1alpha1.BootstrapSpec{APIServerEndpoint: env.vars["API_SERVER"], TokenTTL: metav1.Duration{Duration: 15 * time.Minute}},
			// A discovered server is reached at the class's SSH address (a declared one at its own).
			Variables: map[string]string{"image": robotImage, "poll_interval": "100ms", "rescue_timeout": "1m",
				"install_timeout": "2m", "warm_timeout": "30s",
				"ssh_host": "127.0.0.1", "ssh_port": strconv.Itoa(discovered.SSHPort())},
			NodeTypes: []v1alpha1.NodeType{{
				Name:        "ax52",
				Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")},
				Overhead:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				Offerings:   []v1alpha1.Offering{{Zone: "fsn1", Price: "0.0753"}},
				JoinTimeout: &metav1.Duration{Duration: 5 * time.Minute},
				Deadlines:   v1alpha1.StageDeadlines{Apply: &metav1.Duration{Duration: 5 * time.Minute}},
			}},
		},
	}
	create(t, ctx, nc)
	inv := statelock.LeasePool{Reader: env.kube, Writer: env.kube, Namespace: devenv.StateNamespace, Pool: robot.InventoryPool}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: deploy}})
		_ = env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: deploy + "-restart"}})
		_ = env.kube.Delete(ctx, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: pool}})
		_ = devenv.Poll(ctx, 3*time.Minute, time.Second, "robot claims destroyed", func(ctx context.Context) (bool, error) {
			ok, _, err := devenv.Drained(ctx, env.kube)
			return ok, err
		})
		_ = env.kube.Delete(ctx, nc)
		_ = env.kube.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(devenv.StateNamespace),
			client.MatchingLabels{statelock.LabelInventoryPool: robot.InventoryPool})
	})

	standby := func(ctx context.Context) (int, error) {
		items, err := inv.List(ctx)
		n := 0
		for _, it := range items {
			if it.Free() && it.Attributes[robot.AttrState] == robot.StateStandby {
				n++
			}
		}
		return n, err
	}
	// Nothing is ever done to a server outside the pool: no request about it reaches the
	// webservice, nothing happens to it, it keeps running its system, and it has no lease.
	outsideUntouched := func(when string) {
		t.Helper()
		items, err := inv.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, srv := range foreign {
			n := srv.Number()
			if calls := api.ServerCalls(n); len(calls) > 0 {
				t.Errorf("%s: server %d outside the pool was asked about: %v", when, n, calls)
			}
			if events := srv.Events(); len(events) != foreignEvents[n] {
				t.Errorf("%s: server %d outside the pool was touched: %v", when, n, events[foreignEvents[n]:])
			}
			if state, up := srv.State(); state != robot.StateActive || !up {
				t.Errorf("%s: server %d outside the pool: system %q, running %v", when, n, state, up)
			}
			for _, it := range items {
				if it.ID == strconv.Itoa(n) {
					t.Errorf("%s: server %d outside the pool has a lease: %+v", when, n, it)
				}
			}
		}
	}

	// The keeper installs 901 into standby and resets 902 into its rescue system, which does
	// not come up yet: the controller is killed while the keeper holds 902's lease.
	var ready, interrupted statelock.Item
	eventually(t, ctx, 3*time.Minute, "901 in standby and the keeper waiting for 902's rescue system", func(ctx context.Context) (bool, error) {
		items, err := inv.List(ctx)
		byID := map[string]statelock.Item{}
		for _, it := range items {
			byID[it.ID] = it
		}
		ready, interrupted = byID["901"], byID["902"]
		return ready.Free() && ready.Attributes[robot.AttrState] == robot.StateStandby &&
			interrupted.Leased() && strings.HasPrefix(interrupted.Holder, "pool-keeper/") && slices.Contains(discovered.Events(), "reset"), err
	})
	killController(t)
	killedAt := len(discovered.Events())
	releaseBoots()
	t.Logf("controller killed while %s installed server 902 (events %v)", interrupted.Holder, discovered.Events())
	eventually(t, ctx, 3*time.Minute, "the restarted keeper to install 902 into standby beside 901", func(ctx context.Context) (bool, error) {
		n, err := standby(ctx)
		return n == 2, err
	})
	if it, err := inv.Get(ctx, "902"); err != nil {
		t.Fatal(err)
	} else if it.Leased() || it.Attributes[robot.AttrFailures] != "" || it.Attributes[robot.AttrHostKey] != robot.FormatHostKey(discovered.HostKey()) {
		t.Errorf("server 902 after the interrupted install: %+v, want free, no failure counted, the installed system's host key", it)
	}
	if after := discovered.Events()[killedAt:]; !slices.ContainsFunc(after, func(e string) bool { return strings.HasPrefix(e, "installimage finished") }) {
		t.Errorf("server 902 was not installed after the restart: %v", after)
	}
	outsideUntouched("after the pool's install")
	eventually(t, ctx, time.Minute, "the class to say its type is offered warm only", func(ctx context.Context) (bool, error) {
		got := &v1alpha1.TofuNodeClass{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: class}, got); err != nil {
			return false, err
		}
		c := got.StatusConditions().Get(v1alpha1.ConditionPoolReady)
		return got.StatusConditions().Root().IsTrue() && c != nil && c.Reason == v1alpha1.ReasonColdExceedsWindow &&
			strings.Contains(c.Message, "offered only while servers wait in standby"), nil
	})

	// The pool's machines by state, as the keeper's last round counted them.
	poolMachines := func(want map[string]float64) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			m := scrape(t)
			for state, n := range want {
				if got, series := sumOf(m, "fulfiller_pool_machines", fmt.Sprintf(`class=%q`, class), `family="robot"`, fmt.Sprintf(`state=%q`, state)); got != n || series != 1 {
					return false, nil
				}
			}
			return true, nil
		}
	}
	eventually(t, ctx, time.Minute, "fulfiller_pool_machines to show both servers in standby", poolMachines(map[string]float64{"standby": 2, "free": 0, "leased": 0, "quarantined": 0}))

	// The burst: three pods of 10 CPUs, one per node; two servers wait in standby.
	start := time.Now()
	create(t, ctx, nodePool(pool, class), deployment(deploy, pool, 3, "10"))
	cs := clientset(t)
	robotNodes := func(ctx context.Context) ([]corev1.Node, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []corev1.Node
		for _, n := range list.Items {
			if strings.HasPrefix(n.Spec.ProviderID, "hrobot://") {
				out = append(out, n)
			}
		}
		return out, nil
	}
	var first time.Duration
	eventually(t, ctx, 3*time.Minute, "two Robot nodes", func(ctx context.Context) (bool, error) {
		nodes, err := robotNodes(ctx)
		if len(nodes) > 0 && first == 0 {
			first = time.Since(start)
		}
		return len(nodes) == 2, err
	})
	t.Logf("burst of 3 on 2 standby servers: first Robot node %s, second %s after the apply of the pods", first.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	holders := map[string]string{}
	items, err := inv.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Leased() {
			if prev, dup := holders[it.Holder]; dup {
				t.Errorf("claim %s holds servers %s and %s", it.Holder, prev, it.ID)
			}
			holders[it.Holder] = it.ID
		}
	}
	if len(holders) != 2 {
		t.Errorf("leases %v, want two claims holding one server each", holders)
	}
	eventually(t, ctx, time.Minute, "fulfiller_pool_machines to show both servers leased", poolMachines(map[string]float64{"standby": 0, "leased": 2}))
	outsideUntouched("with both servers leased")
	for _, f := range fulfillments(t, ctx) {
		if f.Spec.NodeClass != class {
			continue
		}
		if holders[statelock.LeaseHolder(f.Name, f.Spec.NodeClaimUID)] != strings.TrimPrefix(f.Spec.ProviderID, "hrobot://") {
			t.Errorf("fulfillment %s (%s) does not hold its server's lease: %v", f.Name, f.Spec.ProviderID, holders)
		}
		if !strings.HasPrefix(f.Spec.ProviderID, "hrobot://") || f.Spec.Parameters["activation_path"] != "warm" {
			t.Errorf("fulfillment %s: provider id %q, parameters %v", f.Name, f.Spec.ProviderID, f.Spec.Parameters)
		}
	}
	// Two pods run on the two nodes; the third waits: nothing can be leased.
	var bound, pending int
	eventually(t, ctx, 2*time.Minute, "two pods bound to the Robot nodes", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + deploy})
		if err != nil {
			return false, err
		}
		bound, pending = 0, 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				pending++
			} else {
				bound++
			}
		}
		return bound == 2, nil
	})
	if pending != 1 {
		t.Errorf("%d pods pending, want 1", pending)
	}
	if n, _ := robotNodes(ctx); len(n) != 2 {
		t.Errorf("%d Robot nodes after the pods were bound, want 2", len(n))
	}

	// The pods go away: drained, released, reinstalled, back in standby; states and leases clean.
	scale := &appsv1.Deployment{}
	if err := env.kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: deploy}, scale); err != nil {
		t.Fatal(err)
	}
	if err := env.kube.Delete(ctx, scale); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	eventually(t, ctx, 4*time.Minute, "the claims destroyed and their servers released", func(ctx context.Context) (bool, error) {
		for _, f := range fulfillments(t, ctx) {
			if f.Spec.NodeClass == class {
				return false, nil
			}
		}
		items, err := inv.List(ctx)
		for _, it := range items {
			if it.Leased() {
				return false, err
			}
		}
		return err == nil, err
	})
	eventually(t, ctx, 2*time.Minute, "both servers back in standby", func(ctx context.Context) (bool, error) {
		n, err := standby(ctx)
		return n == 2, err
	})
	t.Logf("pods gone to both servers back in standby: %s", time.Since(released).Round(100*time.Millisecond))
	secrets := &corev1.SecretList{}
	if err := env.kube.List(ctx, secrets, client.InNamespace(devenv.StateNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for h := range holders {
			claim, _, _ := strings.Cut(h, "/")
			if strings.Contains(s.Name, claim) {
				t.Errorf("state %s of claim %s is left", s.Name, claim)
			}
		}
	}
	if items, _ := inv.List(ctx); len(items) != 2 {
		t.Errorf("leases %d, want 2", len(items))
	} else {
		for _, it := range items {
			if it.Quarantined() || it.Leased() {
				t.Errorf("server %s: %+v", it.ID, it)
			}
		}
	}

	// A controller restart mid-activation: the claims' leases and applies are adopted, not
	// repeated; no server is leased twice, nothing leaks.
	create(t, ctx, deployment(deploy+"-restart", pool, 2, "10"))
	eventually(t, ctx, 2*time.Minute, "a Robot apply in flight", func(ctx context.Context) (bool, error) {
		for _, f := range fulfillments(t, ctx) {
			if f.Spec.NodeClass == class && len(f.Status.Runs) > 0 && f.Status.Runs[0].Phase == v1alpha1.RunRunning {
				return true, nil
			}
		}
		return false, nil
	})
	killController(t)
	eventually(t, ctx, 4*time.Minute, "2 pods bound after the restart", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": deploy + "-restart"}, 2)
	})
	held := map[string]string{}
	if items, err = inv.List(ctx); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Leased() {
			held[it.Holder] = it.ID
		}
	}
	for _, f := range fulfillments(t, ctx) {
		if f.Spec.NodeClass != class {
			continue
		}
		if held[statelock.LeaseHolder(f.Name, f.Spec.NodeClaimUID)] != strings.TrimPrefix(f.Spec.ProviderID, "hrobot://") {
			t.Errorf("after the restart, fulfillment %s (%s) does not hold its server: %v", f.Name, f.Spec.ProviderID, held)
		}
		if started := startedRuns(t, ctx, f.Name, "apply"); started != 1 {
			t.Errorf("fulfillment %s: %d applies started, want 1", f.Name, started)
		}
	}
	if len(held) != 2 {
		t.Errorf("after the restart: leases %v, want two", held)
	}
	if err := env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: deploy + "-restart"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, 4*time.Minute, "both servers released and back in standby after the restart", func(ctx context.Context) (bool, error) {
		for _, f := range fulfillments(t, ctx) {
			if f.Spec.NodeClass == class {
				return false, nil
			}
		}
		n, err := standby(ctx)
		return n == 2, err
	})
	outsideUntouched("at the end")
}
