// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
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
// install takes 2 seconds, a boot 0.2). The pool keeper installs both servers ahead of need;
// the cold path (20 minutes) exceeds the registration window, so the class says the type is
// offered only while servers wait in standby. A burst of three pods gets two nodes, warm, registered as hrobot://<n>, each
// server leased to one claim; the third pod waits. The pods go away: the nodes are drained
// and deleted, the servers released, reinstalled in the background and back in standby, their
// states and leases clean. The controller is killed mid-activation: the claims keep their
// servers, no apply is repeated, and everything is released again.
func TestRobotPool(t *testing.T) {
	ctx := ctxFor(t, 16*time.Minute)
	api, err := standin.StartAPI(standin.APIConfig{User: "#ws+e2e", Password: "e2e robot password"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	timings := standin.RealTimings.Scale(600)
	timings.HeartbeatInterval = 2 * time.Second
	var servers []v1alpha1.RobotServer
	for _, n := range []int{901, 902} {
		srv, err := standin.NewServer(standin.ServerConfig{
			Number: n, Name: "e2e-" + strconv.Itoa(n), Product: "AX52", DC: "FSN1-DC1", Timings: timings,
			Images: []string{robotImage}, StateDir: t.TempDir(),
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		api.AddServer(srv)
		servers = append(servers, v1alpha1.RobotServer{Number: int32(n), NodeType: "ax52",
			SSHAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.SSHPort()))})
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
			Family:      v1alpha1.FamilyRobot,
			Robot:       &v1alpha1.RobotPool{Servers: servers, Warm: &warm},
			Module:      v1alpha1.ModuleSource{Source: filepath.Join(env.vars["MODULES"], "hetzner-robot"), Version: "e2e"},
			Credentials: []v1alpha1.CredentialsSource{{SecretName: "robot-e2e"}},
			Bootstrap:   v1alpha1.BootstrapSpec{APIServerEndpoint: env.vars["API_SERVER"], TokenTTL: metav1.Duration{Duration: 15 * time.Minute}},
			Variables: map[string]string{"image": robotImage, "poll_interval": "100ms", "rescue_timeout": "1m",
				"install_timeout": "2m", "warm_timeout": "30s"},
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
	eventually(t, ctx, 3*time.Minute, "the pool keeper to install both servers into standby", func(ctx context.Context) (bool, error) {
		n, err := standby(ctx)
		return n == 2, err
	})
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
}
