// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/standin"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// poolScope is a robot class of one server reached at srv's SSH port, as the keeper and
// Create see it: its credentials and the real API server's leases in the pool's namespace.
func (p *pool) poolScope(t *testing.T, srv *standin.Server, warm int32) family.Scope {
	t.Helper()
	nc := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "robot-" + p.namespace, UID: types.UID("uid-" + p.namespace), Generation: 1},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:    v1alpha1.FamilyRobot,
			Robot:     &v1alpha1.RobotPool{Servers: []v1alpha1.RobotServer{{Number: int32(srv.Number()), NodeType: "ax52"}}, Warm: &warm},
			NodeTypes: []v1alpha1.NodeType{{Name: "ax52"}},
			Variables: map[string]string{"ssh_host": "127.0.0.1", "ssh_port": strconv.Itoa(srv.SSHPort()), "image": testImage,
				"poll_interval": "100ms", "rescue_timeout": "1m"},
		},
	}
	return family.Scope{Class: nc, Reader: p.inv.Reader, Writer: p.inv.Writer, StateNamespace: p.namespace,
		Env: map[string]string{robot.EnvEndpoint: p.api.URL, robot.EnvUser: apiUser, robot.EnvPassword: apiPassword, robot.EnvSSHKey: p.keyPEM}}
}

// keepUntil runs the keeper (waiting for its background work) until cond holds.
func keepUntil(t *testing.T, f *robot.Family, s family.Scope, live func(context.Context, string, string) (bool, error), what string, cond func(family.PoolReport) bool) family.PoolReport {
	t.Helper()
	var r family.PoolReport
	testenv.Eventually(t, 90*time.Second, what, func() bool {
		var err error
		if r, err = f.Keep(context.Background(), s, live); err != nil {
			t.Fatal(err)
		}
		f.Wait()
		return cond(r)
	})
	return r
}

func noClaim(context.Context, string, string) (bool, error) { return false, nil }

// The pool through the family seam, on real stand-ins and real tofu: the keeper installs a
// fresh server ahead of need and sees it reach standby; Create's lease gives it warm to a
// claim, whose Node registers as hrobot://<n>; the destroy reinstalls it and Release frees
// it; the keeper brings it back to standby with the new host key.
func TestPoolKeeperLeaseAndModule(t *testing.T) {
	t.Parallel()
	p := newPool(t, "robot-pool")
	srv := p.server(t, 621, false)
	f := robot.NewFamily()
	s := p.poolScope(t, srv, 1)
	id := "621"

	r := keepUntil(t, f, s, noClaim, "the keeper to install server 621 as a standby", func(family.PoolReport) bool {
		it, _ := p.inv.Get(context.Background(), id)
		return it.Attributes[robot.AttrState] == robot.StateStandby
	})
	if r.Reason != v1alpha1.ReasonColdExceedsWindow || !strings.Contains(r.Message, "ax52") {
		t.Errorf("report %+v: the 20-minute cold path must be on the condition", r)
	}
	standby, _ := p.inv.Get(context.Background(), id)
	if !standby.Free() || standby.Attributes[robot.AttrHostKey] != robot.FormatHostKey(srv.HostKey()) || standby.Attributes[robot.AttrClass] != s.Class.Name {
		t.Fatalf("server after the keeper's install: %+v", standby)
	}
	if counts, err := f.Offer(context.Background(), s); err != nil || counts["ax52"] != 1 {
		t.Fatalf("offer %v, %v", counts, err)
	}

	const name = "robot-pool-a"
	claim := family.PoolClaim{Name: name, UID: "uid-" + name, NodeType: "ax52"}
	lease, err := f.Lease(context.Background(), s, claim)
	if err != nil {
		t.Fatal(err)
	}
	if lease.Parameters["activation_path"] != "warm" || lease.ProviderID != "hrobot://621" || lease.Parameters["inventory_namespace"] != p.namespace {
		t.Fatalf("lease %+v", lease)
	}
	if _, err := f.Lease(context.Background(), s, family.PoolClaim{Name: "robot-pool-b", UID: "uid-b", NodeType: "ax52"}); err == nil {
		t.Fatal("a second claim got the pool's only server")
	}
	live := func(_ context.Context, n, uid string) (bool, error) { return n == name && uid == claim.UID, nil }

	userData, tok := p.userData(t, name, 621)
	start := time.Now()
	res, log := p.run(t, p.request(t, name, tfrunner.Apply, srv, userData, lease.Parameters), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("apply: %+v\n%s", res.Error, log)
	}
	waitNode(t, p.cs, name, "hrobot://621", 60*time.Second)
	t.Logf("leased warm server: apply to Node registered in %s", time.Since(start).Round(10*time.Millisecond))
	// The keeper leaves a live claim's server alone.
	if _, err := f.Keep(context.Background(), s, live); err != nil {
		t.Fatal(err)
	}
	f.Wait()
	if it, _ := p.inv.Get(context.Background(), id); it.Holder != statelock.LeaseHolder(name, claim.UID) || it.Attributes[robot.AttrState] != robot.StateActive {
		t.Fatalf("server of a live claim: %+v", it)
	}

	res, log = p.run(t, p.request(t, name, tfrunner.Destroy, srv, userData, lease.Parameters), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("destroy: %+v\n%s", res.Error, log)
	}
	if err := f.Release(context.Background(), s, claim); err != nil {
		t.Fatal(err)
	}
	keepUntil(t, f, s, noClaim, "server 621 back in standby after the release", func(family.PoolReport) bool {
		it, _ := p.inv.Get(context.Background(), id)
		return it.Free() && it.Attributes[robot.AttrState] == robot.StateStandby
	})
	back, _ := p.inv.Get(context.Background(), id)
	if back.Attributes[robot.AttrHostKey] == standby.Attributes[robot.AttrHostKey] || back.Attributes[robot.AttrHostKey] != robot.FormatHostKey(srv.HostKey()) {
		t.Errorf("the reinstall's new host key is not the recorded one")
	}
}

// A standby server someone used outside the pool: the warm activation fails NotInStandby
// and records it (the server becomes unverified); the destroy installs nothing over it; the
// keeper finds it still not in standby: the second failure quarantines it, with the reason on
// the pool's condition and one event. It is not offered again.
func TestPoolQuarantinesServerUsedOutside(t *testing.T) {
	t.Parallel()
	p := newPool(t, "robot-quarantine")
	srv := p.server(t, 721, true)
	f := robot.NewFamily()
	s := p.poolScope(t, srv, 0)
	keepUntil(t, f, s, noClaim, "the pool's lease", func(r family.PoolReport) bool { return r.Reason != v1alpha1.ReasonPoolUnchecked })
	testenv.Eventually(t, 30*time.Second, "the standby server to boot", func() bool { _, up := srv.State(); return up })
	srv.UseOutsidePool()
	touched := len(srv.Events())

	const name = "robot-quarantine-a"
	claim := family.PoolClaim{Name: name, UID: "uid-" + name, NodeType: "ax52"}
	lease, err := f.Lease(context.Background(), s, claim)
	if err != nil {
		t.Fatal(err)
	}
	userData, tok := p.userData(t, name, 721)
	res, _ := p.run(t, p.request(t, name, tfrunner.Apply, srv, userData, lease.Parameters), tok.Secret)
	if res.Succeeded {
		t.Fatal("a warm activation of a server in use succeeded")
	}
	it, _ := p.inv.Get(context.Background(), "721")
	if it.Attributes[robot.AttrState] != robot.StateUnverified || it.Attributes[robot.AttrFailures] != "1" || it.Attributes[robot.AttrLastFailure] != robotrules.ReasonNotStandby {
		t.Fatalf("after the failed activation: %+v", it)
	}
	// The failed activation left its resource tainted: its destroy runs no provisioner. Had it
	// run, `fulfiller robot release` would have refused to install over an unverified server.
	res, log := p.run(t, p.request(t, name, tfrunner.Destroy, srv, userData, lease.Parameters), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("destroy: %+v\n%s", res.Error, log)
	}
	if err := f.Release(context.Background(), s, claim); err != nil {
		t.Fatal(err)
	}
	r := keepUntil(t, f, s, noClaim, "the server's quarantine", func(r family.PoolReport) bool { return r.Reason == v1alpha1.ReasonServersQuarantined })
	if r.Healthy || !strings.Contains(r.Message, "server 721 ("+robotrules.ReasonNotStandby) || len(r.Events) != 1 || r.Events[0].Reason != v1alpha1.ReasonServerQuarantined {
		t.Errorf("report %+v", r)
	}
	if events := srv.Events(); len(events) != touched {
		t.Errorf("the server in use was touched: %v", events[touched:])
	}
	if counts, _ := f.Offer(context.Background(), s); counts["ax52"] != 0 {
		t.Errorf("a quarantined server is offered: %v", counts)
	}
	if it, _ := p.inv.Get(context.Background(), "721"); !it.Quarantined() || it.Leased() {
		t.Errorf("server %+v", it)
	}
}

// TestPoolKeeperTouchesOnlyItsServers (issue 25, defects 2, 4 and 6), on the real stand-ins
// and the real API server's leases: the account holds a server outside the pool (db-632, the
// pool's product) and one renamed out of it after the keeper read the account (pool-630,
// now db-630); the controller stops while the keeper installs server 631. Neither foreign
// server is ever reset; the interrupted install's lease is given back and a restarted keeper
// installs 631 anew into standby, probing it over SSH without a webservice read per probe.
func TestPoolKeeperTouchesOnlyItsServers(t *testing.T) {
	t.Parallel()
	p := newPool(t, "robot-foreign")
	slow := fastTimings
	slow.Boot = 3 * time.Second // the keeper's install waits that long for the rescue system
	srv := addServer(t, p.api, standin.ServerConfig{Number: 631, Name: "pool-631", Product: "AX52", DC: "FSN1-DC1", Timings: slow,
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")}})
	db := addServer(t, p.api, standin.ServerConfig{Number: 632, Name: "db-632", Product: "AX52", DC: "FSN1-DC1", Timings: fastTimings})
	renamed := addServer(t, p.api, standin.ServerConfig{Number: 630, Name: "pool-630", Product: "AX52", DC: "FSN1-DC1", Timings: fastTimings})
	warm := int32(0)
	nc := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "robot-foreign", UID: "uid-robot-foreign", Generation: 1},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family: v1alpha1.FamilyRobot,
			Robot: &v1alpha1.RobotPool{Warm: &warm,
				Servers:  []v1alpha1.RobotServer{{Number: 631, NodeType: "ax52", SSHAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.SSHPort()))}},
				Discover: []v1alpha1.RobotDiscovery{{NamePrefix: "pool-", NodeType: "ax52"}}},
			NodeTypes: []v1alpha1.NodeType{{Name: "ax52"}},
			Variables: map[string]string{"image": testImage, "poll_interval": "100ms", "rescue_timeout": "1m"},
		},
	}
	s := family.Scope{Class: nc, Reader: p.inv.Reader, Writer: p.inv.Writer, StateNamespace: p.namespace,
		Env: map[string]string{robot.EnvEndpoint: p.api.URL, robot.EnvUser: apiUser, robot.EnvPassword: apiPassword, robot.EnvSSHKey: p.keyPEM}}
	ctx := context.Background()
	leader, stop := context.WithCancel(ctx)
	f := robot.NewFamily()
	keep := func() {
		t.Helper()
		if _, err := f.Keep(leader, s, noClaim); err != nil {
			t.Fatal(err)
		}
	}
	keep() // the account read: 630 and 631 are the pool's, 632 is not
	// Its owner renames 630 for another use; the keeper's reading of the account is older.
	renamed.Rename("db-630")
	one := int32(1)
	nc.Spec.Robot.Warm, nc.Generation = &one, 2
	keep() // 630 is the first fresh server: its install finds it renamed, and touches nothing
	f.Wait()
	keep() // the account read again: 631 installs
	testenv.Eventually(t, 30*time.Second, "the keeper to reset server 631 into the rescue system", func() bool {
		it, _ := p.inv.Get(ctx, "631")
		return it.Leased() && strings.HasPrefix(it.Holder, "pool-keeper/") && slices.Contains(srv.Events(), "reset")
	})
	// The controller stops while 631's rescue system boots.
	stop()
	f.Wait()
	if it, _ := p.inv.Get(ctx, "631"); it.Leased() || it.Attributes[robot.AttrFailures] != "" {
		t.Errorf("server 631 after the keeper stopped mid-install: %+v, want released, no failure counted", it)
	}

	restarted := robot.NewFamily()
	keepUntil(t, restarted, s, noClaim, "the restarted keeper to install server 631 into standby", func(family.PoolReport) bool {
		it, _ := p.inv.Get(ctx, "631")
		return it.Free() && it.Attributes[robot.AttrState] == robot.StateStandby
	})
	if it, _ := p.inv.Get(ctx, "631"); it.Attributes[robot.AttrHostKey] != robot.FormatHostKey(srv.HostKey()) {
		t.Errorf("server 631: %+v, want the installed system's host key", it)
	}
	for _, foreign := range []*standin.Server{db, renamed} {
		if events := foreign.Events(); len(events) > 0 {
			t.Errorf("server %d outside the pool was touched: %v", foreign.Number(), events)
		}
	}
	if it, err := p.inv.Get(ctx, "630"); err == nil && (it.Attributes[robot.AttrClass] != "" || it.Leased()) {
		t.Errorf("server 630, renamed out of the pool: %+v", it)
	}
	if _, err := p.inv.Get(ctx, "632"); err == nil {
		t.Errorf("server 632, outside the pool, has a lease")
	}
	if counts, err := restarted.Offer(ctx, s); err != nil || counts["ax52"] != 1 {
		t.Errorf("offer %v, %v; want server 631", counts, err)
	}
	// Server reads: one per install started (630, refused; 631 twice); the probes read none.
	// Account listings: the first, the one after 630 was found renamed, the restarted keeper's.
	reads, lists := 0, 0
	for _, c := range p.api.Calls() {
		switch c {
		case robot.EndpointServer:
			reads++
		case robot.EndpointServers:
			lists++
		}
	}
	if reads != 3 || lists != 3 {
		t.Errorf("%d server reads and %d account listings, want 3 (the installs') and 3", reads, lists)
	}
}
