// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

const stateNS = "fulfiller-states"

// fakeMachines is the Robot account and its servers as the keeper sees them: each server's
// installed state and host key, installs that succeed (recording a new key) or fail.
type fakeMachines struct {
	mu        sync.Mutex
	servers   []Server
	serverErr error
	state     map[int]string // what an installed system answers
	hostKey   map[int]string // the key it presents
	failInst  map[int]bool
	installs  []int
	probes    []int
	// block makes the install of a server hang after recording its new key, until its
	// context ends (or unblock closes), announcing itself on the channel.
	block   map[int]chan struct{}
	unblock chan struct{}
}

func newFakeMachines(numbers ...int) *fakeMachines {
	m := &fakeMachines{state: map[int]string{}, hostKey: map[int]string{}, failInst: map[int]bool{}, block: map[int]chan struct{}{},
		unblock: make(chan struct{})}
	for _, n := range numbers {
		m.servers = append(m.servers, Server{Number: n, Name: fmt.Sprintf("node-%d", n), Product: "AX41", Status: "ready"})
	}
	return m
}

func (m *fakeMachines) Servers(context.Context) ([]Server, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.servers), m.serverErr
}

func (m *fakeMachines) Probe(_ context.Context, srv Server, hostKey string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	server := srv.Number
	m.probes = append(m.probes, server)
	if got := m.hostKey[server]; got != hostKey {
		return "", &HostKeyMismatchError{Addr: fmt.Sprint(server), Want: hostKey, Got: got}
	}
	st, ok := m.state[server]
	if !ok {
		return "", errors.New("connection refused")
	}
	return st, nil
}

func (m *fakeMachines) InstallStandby(ctx context.Context, srv Server, rec Recorder) error {
	server := srv.Number
	m.mu.Lock()
	m.installs = append(m.installs, server)
	block := m.block[server]
	fail := m.failInst[server]
	m.mu.Unlock()
	key := fmt.Sprintf("ssh-ed25519 KEY%d", server)
	if err := rec.Record(ctx, server, map[string]string{AttrHostKey: key, AttrState: StateReinstalling}); err != nil {
		return err
	}
	if block != nil {
		block <- struct{}{} // the install runs: the test may stop the keeper now
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.unblock:
			return errors.New("the test ended")
		}
	}
	if fail {
		return fmt.Errorf("%w: installimage exited 1", ErrInstallFailed)
	}
	m.mu.Lock()
	m.hostKey[server], m.state[server] = key, StateStandby
	m.mu.Unlock()
	return nil
}

type fixture struct {
	t   *testing.T
	ctx context.Context
	fam *Family
	m   *fakeMachines
	nc  *v1alpha1.TofuNodeClass
	s   family.Scope
	inv statelock.LeasePool
	now time.Time
}

func newFixture(t *testing.T, pool v1alpha1.RobotPool, m *fakeMachines) *fixture {
	kube := test.NewClient(nil)
	nc := test.NodeClass("robot", func(nc *v1alpha1.TofuNodeClass) {
		nc.Spec.Family = v1alpha1.FamilyRobot
		nc.Spec.Robot = &pool
		nc.Spec.NodeTypes = []v1alpha1.NodeType{test.NodeType("ax41"), test.NodeType("ax101")}
	})
	fx := &fixture{t: t, ctx: context.Background(), m: m, nc: nc, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	fx.fam = &Family{Now: func() time.Time { return fx.now }, NewMachines: func(family.Scope) (Machines, error) { return m, nil }}
	fx.s = family.Scope{Class: nc, Reader: kube, Writer: kube, StateNamespace: stateNS, Env: map[string]string{EnvUser: "u"}}
	fx.inv = inventory(fx.s)
	if err := kube.Create(fx.ctx, nc.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	return fx
}

// edit changes the class's pool as an edit of spec.robot would (a new generation).
func (fx *fixture) edit(change func(*v1alpha1.RobotPool)) {
	change(fx.nc.Spec.Robot)
	fx.nc.Generation++
}

func servers(nodeType string, numbers ...int32) []v1alpha1.RobotServer {
	var out []v1alpha1.RobotServer
	for _, n := range numbers {
		out = append(out, v1alpha1.RobotServer{Number: n, NodeType: nodeType})
	}
	return out
}

func int32p(v int32) *int32 { return &v }

func noClaims(context.Context, string, string) (bool, error) { return false, nil }

func (fx *fixture) keep(live func(context.Context, string, string) (bool, error)) family.PoolReport {
	fx.t.Helper()
	r, err := fx.fam.Keep(fx.ctx, fx.s, live)
	if err != nil {
		fx.t.Fatal(err)
	}
	fx.fam.Wait()
	return r
}

func (fx *fixture) item(id string) statelock.Item {
	fx.t.Helper()
	it, err := fx.inv.Get(fx.ctx, id)
	if err != nil {
		fx.t.Fatal(err)
	}
	return it
}

// standby makes servers standbys, as the keeper leaves them after an install.
func (fx *fixture) standby(numbers ...int) {
	fx.t.Helper()
	for _, n := range numbers {
		id := fmt.Sprint(n)
		key := "ssh-ed25519 KEY" + id
		if err := fx.inv.SetAttributes(fx.ctx, id, "", map[string]string{AttrState: StateStandby, AttrHostKey: key}); err != nil {
			fx.t.Fatal(err)
		}
		fx.m.hostKey[n], fx.m.state[n] = key, StateStandby
	}
}

func TestKeepDeclaresInstallsAheadAndReturnsToStandby(t *testing.T) {
	m := newFakeMachines(101, 102, 103, 201)
	m.servers[3].Name, m.servers[3].Product = "gpu-1", "AX101"
	fx := newFixture(t, v1alpha1.RobotPool{
		Servers:  append(servers("ax41", 101, 102, 103), servers("ax41", 999)...),
		Discover: []v1alpha1.RobotDiscovery{{Product: "AX101", NodeType: "ax101"}},
		Warm:     int32p(2),
	}, m)

	r := fx.keep(noClaims)
	if r.Healthy || r.Reason != v1alpha1.ReasonPoolInvalid || !strings.Contains(r.Message, "server 999 is not in the Robot account") {
		t.Fatalf("report = %+v, want PoolInvalid naming server 999", r)
	}
	for id, nt := range map[string]string{"101": "ax41", "102": "ax41", "103": "ax41", "201": "ax101"} {
		if it := fx.item(id); it.Attributes[AttrClass] != "robot" || it.Attributes[AttrNodeType] != nt {
			t.Errorf("server %s: attributes %v, want class robot and node type %s", id, it.Attributes, nt)
		}
	}
	if _, err := fx.inv.Get(fx.ctx, "999"); !errors.Is(err, statelock.ErrUnknownItem) {
		t.Errorf("server 999 has a lease (%v): an unknown server must not be offered", err)
	}
	// Two ax41 and one ax101 installed ahead of need (warm 2), in the background.
	slices.Sort(m.installs)
	if want := []int{101, 102, 201}; !slices.Equal(m.installs, want) {
		t.Fatalf("installed %v, want %v", m.installs, want)
	}
	for _, id := range []string{"101", "102", "201"} {
		if it := fx.item(id); it.Attributes[AttrState] != StateReinstalling || it.Leased() || it.Attributes[AttrHostKey] == "" {
			t.Errorf("server %s after the install: %+v, want free, reinstalling, host key recorded", id, it)
		}
	}
	// The next round probes them with the recorded key: standby, offered warm.
	fx.keep(noClaims)
	for _, id := range []string{"101", "102", "201"} {
		if it := fx.item(id); it.Attributes[AttrState] != StateStandby {
			t.Errorf("server %s: state %q, want standby", id, it.Attributes[AttrState])
		}
	}
	counts, err := fx.fam.Offer(fx.ctx, fx.s)
	if err != nil {
		t.Fatal(err)
	}
	if counts["ax41"] != 2 || counts["ax101"] != 1 {
		t.Errorf("offer %v: want ax41 2 (warm; cold exceeds the window), ax101 1", counts)
	}
	if len(m.installs) != 3 {
		t.Errorf("installed again: %v", m.installs)
	}
}

func TestLeaseWarmNeverTwiceAndExhaustion(t *testing.T) {
	m := newFakeMachines(101, 102, 103)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101, 102, 103), Warm: int32p(0)}, m)
	r := fx.keep(noClaims)
	if r.Reason != v1alpha1.ReasonColdExceedsWindow || !strings.Contains(r.Message, "offered only while servers wait in standby") {
		t.Fatalf("report = %+v, want the cold path's window on the condition", r)
	}
	fx.standby(101, 102)

	got := map[string]string{}
	for i := range 3 {
		claim := family.PoolClaim{Name: fmt.Sprintf("c%d", i), UID: fmt.Sprintf("u%d", i), NodeType: "ax41"}
		lease, err := fx.fam.Lease(fx.ctx, fx.s, claim)
		if i == 2 {
			if !errors.Is(err, family.ErrPoolExhausted) || !strings.Contains(err.Error(), "exceeds Karpenter's 15m0s registration window") {
				t.Fatalf("third claim: %v, want ErrPoolExhausted saying the cold path does not fit", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		p := lease.Parameters
		if p["activation_path"] != "warm" || p["host_key"] != "ssh-ed25519 KEY"+p["server_number"] || p["inventory_namespace"] != stateNS ||
			p["lease_holder"] != statelock.LeaseHolder(claim.Name, claim.UID) || lease.ProviderID != "hrobot://"+p["server_number"] {
			t.Errorf("lease %d: %+v", i, lease)
		}
		if prev, dup := got[p["server_number"]]; dup {
			t.Fatalf("server %s leased to %s and %s", p["server_number"], prev, claim.Name)
		}
		got[p["server_number"]] = claim.Name
		// Again (a restarted controller): the same server.
		again, err := fx.fam.Lease(fx.ctx, fx.s, claim)
		if err != nil || again.Parameters["server_number"] != p["server_number"] {
			t.Fatalf("lease again: %+v, %v", again, err)
		}
	}
	if counts, _ := fx.fam.Offer(fx.ctx, fx.s); counts["ax41"] != 0 {
		t.Errorf("offer %v with every standby leased: want ax41 0", counts)
	}
	// Release gives it back: the module's release recorded reinstalling.
	if err := fx.inv.SetAttributes(fx.ctx, "101", statelock.LeaseHolder("c0", "u0"), map[string]string{AttrState: StateReinstalling}); err != nil {
		t.Fatal(err)
	}
	claim := family.PoolClaim{Name: "c0", UID: "u0"}
	if err := fx.fam.Release(fx.ctx, fx.s, claim); err != nil {
		t.Fatal(err)
	}
	if err := fx.fam.Release(fx.ctx, fx.s, claim); err != nil {
		t.Fatalf("releasing twice: %v", err)
	}
	if it := fx.item("101"); it.Leased() || it.Quarantined() {
		t.Errorf("after release: %+v", it)
	}
}

func TestColdPathWhenItFitsTheWindow(t *testing.T) {
	m := newFakeMachines(101)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101), Warm: int32p(0),
		ColdActivation: &metav1.Duration{Duration: 4 * time.Minute}}, m)
	if r := fx.keep(noClaims); !r.Healthy || r.Reason != v1alpha1.ReasonPoolHealthy {
		t.Fatalf("report = %+v", r)
	}
	lease, err := fx.fam.Lease(fx.ctx, fx.s, family.PoolClaim{Name: "c", UID: "u", NodeType: "ax41"})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Parameters["activation_path"] != "cold" || lease.Parameters["host_key"] != "" {
		t.Errorf("lease %+v, want the cold path", lease)
	}
}

func TestQuarantineAfterTwoFailuresWithEvent(t *testing.T) {
	m := newFakeMachines(101, 102)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101, 102), Warm: int32p(0)}, m)
	fx.keep(noClaims)
	fx.standby(101, 102)
	claim := family.PoolClaim{Name: "c", UID: "u", NodeType: "ax41"}
	holder := statelock.LeaseHolder("c", "u")
	// First activation fails (the command records it): one failure, not quarantined.
	lease, err := fx.fam.Lease(fx.ctx, fx.s, claim)
	if err != nil {
		t.Fatal(err)
	}
	id := lease.Parameters["server_number"]
	rec := InventoryRecorder{Inventory: fx.inv, Holder: holder}
	if err := recordFailure(fx.ctx, rec, number(id), fmt.Errorf("%w: server reports active", ErrNotStandby)); err != nil {
		t.Fatal(err)
	}
	if err := fx.fam.Release(fx.ctx, fx.s, claim); err != nil {
		t.Fatal(err)
	}
	it := fx.item(id)
	if it.Quarantined() || it.Attributes[AttrState] != StateUnverified || it.Attributes[AttrFailures] != "1" {
		t.Fatalf("after one failure: %+v", it)
	}
	if counts, _ := fx.fam.Offer(fx.ctx, fx.s); counts["ax41"] != 1 {
		t.Errorf("an unverified server is offered: %v", counts)
	}
	// The keeper probes it: it still says active (used outside the pool): the second failure.
	m.state[number(id)] = StateActive
	fx.keep(noClaims)      // starts the probe in the background
	r := fx.keep(noClaims) // reports it
	it = fx.item(id)
	if !it.Quarantined() || !strings.Contains(it.QuarantineReason, robotrules.ReasonNotStandby) {
		t.Fatalf("after two failures: %+v", it)
	}
	if r.Healthy || r.Reason != v1alpha1.ReasonServersQuarantined || !strings.Contains(r.Message, "server "+id) {
		t.Errorf("report = %+v", r)
	}
	if len(r.Events) != 1 || r.Events[0].Reason != v1alpha1.ReasonServerQuarantined || !r.Events[0].Warning {
		t.Errorf("events = %+v, want one ServerQuarantined warning", r.Events)
	}
	if r := fx.keep(noClaims); len(r.Events) != 0 {
		t.Errorf("quarantine reported again: %+v", r.Events)
	}
	if counts, _ := fx.fam.Offer(fx.ctx, fx.s); counts["ax41"] != 1 {
		t.Errorf("offer %v: the quarantined server must not count", counts)
	}
	if _, err := fx.fam.Lease(fx.ctx, fx.s, family.PoolClaim{Name: "d", UID: "v", NodeType: "ax41"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.fam.Lease(fx.ctx, fx.s, family.PoolClaim{Name: "e", UID: "w", NodeType: "ax41"}); !errors.Is(err, family.ErrPoolExhausted) {
		t.Errorf("leased the quarantined server: %v", err)
	}
}

func TestKeepInstallFailuresQuarantine(t *testing.T) {
	m := newFakeMachines(101)
	m.failInst[101] = true
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101), Warm: int32p(1)}, m)
	fx.keep(noClaims)
	if it := fx.item("101"); it.Quarantined() || it.Attributes[AttrFailures] != "1" || it.Leased() {
		t.Fatalf("after one failed install: %+v", it)
	}
	fx.keep(noClaims)
	r := fx.keep(noClaims)
	if it := fx.item("101"); !it.Quarantined() || !strings.Contains(it.QuarantineReason, robotrules.ReasonInstallFailed) || it.Leased() {
		t.Fatalf("after two failed installs: %+v", it)
	}
	if r.Reason != v1alpha1.ReasonServersQuarantined {
		t.Errorf("report = %+v", r)
	}
	if len(m.installs) != 2 {
		t.Errorf("installs %v, want two", m.installs)
	}
}

func TestKeepSweepsLeasesOfGoneClaims(t *testing.T) {
	m := newFakeMachines(101, 102, 103)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101, 102, 103), Warm: int32p(0)}, m)
	fx.keep(noClaims)
	fx.standby(101, 102, 103)
	for _, c := range []string{"gone", "alive", "active"} {
		if _, err := fx.fam.Lease(fx.ctx, fx.s, family.PoolClaim{Name: c, UID: "u-" + c, NodeType: "ax41"}); err != nil {
			t.Fatal(err)
		}
	}
	// The claim "active" activated its server, then vanished without a destroy.
	if err := fx.inv.SetAttributes(fx.ctx, "103", statelock.LeaseHolder("active", "u-active"), map[string]string{AttrState: StateActive}); err != nil {
		t.Fatal(err)
	}
	live := func(_ context.Context, name, uid string) (bool, error) {
		return name == "alive" && uid == "u-alive", nil
	}
	fx.keep(live)
	if it := fx.item("101"); it.Leased() || it.Quarantined() {
		t.Errorf("lease of a claim gone before its activation: %+v, want released", it)
	}
	if it := fx.item("102"); it.Holder != statelock.LeaseHolder("alive", "u-alive") {
		t.Errorf("lease of a live claim: %+v", it)
	}
	if it := fx.item("103"); it.Leased() || !it.Quarantined() || !strings.Contains(it.QuarantineReason, "LeaseOrphaned") {
		t.Errorf("server of a vanished active claim: %+v, want released and quarantined", it)
	}
}

func TestServerInAnotherClassAndCredentials(t *testing.T) {
	m := newFakeMachines(101)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101), Warm: int32p(0)}, m)
	if err := fx.s.Writer.Create(fx.ctx, test.NodeClass("other")); err != nil {
		t.Fatal(err)
	}
	if err := fx.inv.Ensure(fx.ctx, "101"); err != nil {
		t.Fatal(err)
	}
	if err := fx.inv.SetAttributes(fx.ctx, "101", "", map[string]string{AttrClass: "other", AttrNodeType: "x"}); err != nil {
		t.Fatal(err)
	}
	if r := fx.keep(noClaims); r.Reason != v1alpha1.ReasonPoolInvalid || !strings.Contains(r.Message, "server 101 is in the pool of class other") {
		t.Errorf("report = %+v", r)
	}
	if it := fx.item("101"); it.Attributes[AttrClass] != "other" {
		t.Errorf("another class's server was taken: %+v", it)
	}

	m.serverErr = &APIError{Status: 401, Code: CodeUnauthorized, Message: "login failed"}
	err := fx.fam.CheckCredentials(fx.ctx, fx.s)
	var fe *family.Error
	if !errors.As(err, &fe) || fe.Reason != v1alpha1.ReasonInvalidCredentials {
		t.Errorf("CheckCredentials = %v, want InvalidCredentials", err)
	}
	fx.fam = &Family{NewMachines: func(family.Scope) (Machines, error) { return m, nil }}
	if r := fx.keep(noClaims); r.Reason != v1alpha1.ReasonPoolUnchecked {
		t.Errorf("report with wrong credentials = %+v", r)
	}
}

// A server released without a reinstall after a failed cold activation (the destroy of a
// node of the 0.1.0 module skipped it) is fresh again: the keeper installs it anew, and its
// failure stays counted.
func TestKeepReinstallsAfterFailedActivation(t *testing.T) {
	m := newFakeMachines(101)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101), Warm: int32p(0),
		ColdActivation: &metav1.Duration{Duration: 4 * time.Minute}}, m)
	fx.keep(noClaims)
	claim := family.PoolClaim{Name: "c", UID: "u", NodeType: "ax41"}
	if lease, err := fx.fam.Lease(fx.ctx, fx.s, claim); err != nil || lease.Parameters["activation_path"] != "cold" {
		t.Fatalf("lease %+v, %v", lease, err)
	}
	rec := InventoryRecorder{Inventory: fx.inv, Holder: statelock.LeaseHolder("c", "u")}
	if err := rec.Record(fx.ctx, 101, map[string]string{AttrState: StateInstalling, AttrHostKey: "ssh-ed25519 NEW"}); err != nil {
		t.Fatal(err)
	}
	if err := recordFailure(fx.ctx, rec, 101, fmt.Errorf("%w: installimage exited 1", ErrInstallFailed)); err != nil {
		t.Fatal(err)
	}
	if err := fx.fam.Release(fx.ctx, fx.s, claim); err != nil {
		t.Fatal(err)
	}
	fx.keep(noClaims)
	it := fx.item("101")
	if it.Attributes[AttrState] != "" || it.Attributes[AttrFailures] != "1" || it.Quarantined() || it.Leased() {
		t.Fatalf("after the failed cold activation's release: %+v", it)
	}
	if counts, _ := fx.fam.Offer(fx.ctx, fx.s); counts["ax41"] != 1 {
		t.Errorf("offer %v: a fresh server fits the window cold", counts)
	}
}

// TestDiscoverWithoutSelectorTakesNothing (issue 25, defect 2): a discover entry with neither
// namePrefix nor product (or one whose field the API server dropped as misspelt, from a CRD
// older than the rule that refuses it) takes no server into the pool and installs nothing:
// the account's other servers, a production database among them, are never reset. A
// selector takes only the servers it names.
func TestDiscoverWithoutSelectorTakesNothing(t *testing.T) {
	m := newFakeMachines(101, 102)
	m.servers[1].Name = "db-prod" // the same product as the pool's, outside it
	fx := newFixture(t, v1alpha1.RobotPool{Discover: []v1alpha1.RobotDiscovery{{NodeType: "ax41"}}, Warm: int32p(2)}, m)
	r := fx.keep(noClaims)
	if r.Healthy || r.Reason != v1alpha1.ReasonPoolInvalid || !strings.Contains(r.Message, "neither namePrefix nor product") {
		t.Errorf("report = %+v, want PoolInvalid naming the discover entry without a selector", r)
	}
	if len(m.installs) != 0 {
		t.Fatalf("installed %v: a discover entry without a selector took the account's servers", m.installs)
	}
	for _, id := range []string{"101", "102"} {
		if it, err := fx.inv.Get(fx.ctx, id); err == nil && it.Attributes[AttrClass] != "" {
			t.Errorf("server %s joined the pool: %+v", id, it)
		}
	}
	if counts, _ := fx.fam.Offer(fx.ctx, fx.s); counts["ax41"] != 0 {
		t.Errorf("offer %v, want nothing", counts)
	}
	if errs := fx.nc.Spec.Robot.Validate(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "robot.discover[0]") {
		t.Errorf("Validate() = %v, want the entry named", errs)
	}

	fx.edit(func(p *v1alpha1.RobotPool) { p.Discover[0].NamePrefix = "node-" })
	fx.keep(noClaims)
	if !slices.Equal(m.installs, []int{101}) {
		t.Errorf("installed %v, want only 101 (named node-101)", m.installs)
	}
	if it, err := fx.inv.Get(fx.ctx, "102"); err == nil && it.Attributes[AttrClass] != "" {
		t.Errorf("server 102 (db-prod) joined the pool: %+v", it)
	}
}

// TestKeeperInstallResumedAfterRestart (issue 25, defect 4): an install the keeper was making
// when its controller died does not keep the server leased to it forever: the next keeper
// gives the lease back, follows the reinstall it had started and, when that never reaches
// standby, installs the server anew; the server is offered again.
func TestKeeperInstallResumedAfterRestart(t *testing.T) {
	m := newFakeMachines(101)
	started := make(chan struct{}, 1)
	m.block[101] = started
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101), Warm: int32p(1)}, m)
	dead, kill := context.WithCancel(context.Background())
	t.Cleanup(func() { kill(); close(m.unblock); fx.fam.Wait() })
	if _, err := fx.fam.Keep(dead, fx.s, noClaims); err != nil {
		t.Fatal(err)
	}
	<-started
	held := fx.item("101")
	if !isKeeperHolder(held.Holder) || held.Attributes[AttrState] != StateReinstalling {
		t.Fatalf("server during the install: %+v", held)
	}
	// The controller dies mid-install: its goroutine never gets to give the lease back. A new
	// process keeps the pool.
	m.mu.Lock()
	delete(m.block, 101)
	m.mu.Unlock()
	restarted := &Family{Now: fx.fam.Now, NewMachines: fx.fam.NewMachines}
	keep := func() {
		t.Helper()
		if _, err := restarted.Keep(fx.ctx, fx.s, noClaims); err != nil {
			t.Fatal(err)
		}
		restarted.Wait()
	}
	keep()
	if it := fx.item("101"); it.Leased() || it.Attributes[AttrState] != StateReinstalling || it.Attributes[AttrFailures] != "" {
		t.Fatalf("after the restart: %+v, want released, still reinstalling, no failure counted", it)
	}
	// The interrupted reinstall never reaches standby: after the cold activation time and the
	// install's budget it counts as failed, and the server is installed anew.
	keep()
	fx.now = fx.now.Add(fx.nc.Spec.Robot.ColdActivationOrDefault().Duration + backgroundBudget + time.Minute)
	keep() // the failure
	keep() // the new install
	keep() // its probe: standby
	it := fx.item("101")
	if it.Leased() || it.Attributes[AttrState] != StateStandby || it.Quarantined() {
		t.Fatalf("after the new install: %+v, want free and in standby", it)
	}
	if counts, _ := restarted.Offer(fx.ctx, fx.s); counts["ax41"] != 1 {
		t.Errorf("offer %v, want the server again", counts)
	}
}

// TestKeeperStopReleasesInstall (issue 25, defect 4): a keeper that stops (its leader's context
// ends) mid-install gives the server's lease back at once, and the interrupted install is no
// failure of the server.
func TestKeeperStopReleasesInstall(t *testing.T) {
	m := newFakeMachines(101)
	started := make(chan struct{}, 1)
	m.block[101] = started
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101), Warm: int32p(1)}, m)
	leader, stop := context.WithCancel(context.Background())
	t.Cleanup(func() { close(m.unblock); fx.fam.Wait() })
	if _, err := fx.fam.Keep(leader, fx.s, noClaims); err != nil {
		t.Fatal(err)
	}
	<-started
	stop()
	done := make(chan struct{})
	go func() { fx.fam.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the install goes on after its keeper stopped")
	}
	if it := fx.item("101"); it.Leased() || it.Attributes[AttrFailures] != "" || it.Quarantined() {
		t.Errorf("after the keeper stopped: %+v, want released without a failure", it)
	}
}

// TestPoolOffersOnlyCurrentMembers (issue 25, defect 5): a server removed from spec.robot is
// offered no more from the moment of the edit; one cancelled or gone from the account leaves
// the pool at the keeper's next reading of the account; one moved to another class is that
// class's once the old one has let it go, never both.
func TestPoolOffersOnlyCurrentMembers(t *testing.T) {
	m := newFakeMachines(101, 102, 103, 104)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101, 102, 103, 104), Warm: int32p(0)}, m)
	fx.keep(noClaims)
	fx.standby(101, 102, 103, 104)
	offer := func(f *Family, s family.Scope) int {
		t.Helper()
		counts, err := f.Offer(fx.ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return counts["ax41"]
	}
	if n := offer(fx.fam, fx.s); n != 4 {
		t.Fatalf("offer %d, want 4", n)
	}
	// 104 is removed from the spec: not leased even before the keeper runs.
	fx.edit(func(p *v1alpha1.RobotPool) { p.Servers = servers("ax41", 101, 102, 103) })
	for i := range 4 {
		lease, err := fx.fam.Lease(fx.ctx, fx.s, family.PoolClaim{Name: fmt.Sprintf("c%d", i), UID: fmt.Sprintf("u%d", i), NodeType: "ax41"})
		if err == nil && lease.Parameters["server_number"] == "104" {
			t.Fatalf("claim c%d leased server 104, removed from the pool", i)
		}
	}
	for i := range 4 {
		if err := fx.fam.Release(fx.ctx, fx.s, family.PoolClaim{Name: fmt.Sprintf("c%d", i), UID: fmt.Sprintf("u%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	fx.keep(noClaims)
	if n := offer(fx.fam, fx.s); n != 3 {
		t.Errorf("offer %d after the keeper saw the edit, want 3", n)
	}
	if it := fx.item("104"); it.Attributes[AttrClass] != "" {
		t.Errorf("server 104 removed from the pool: %+v, want it given up", it)
	}
	// 101 is cancelled, 102 gone from the account: they leave at the next reading.
	m.mu.Lock()
	m.servers[0].Cancelled = true
	m.servers = slices.Delete(m.servers, 1, 2)
	m.mu.Unlock()
	fx.now = fx.now.Add(accountTTL)
	fx.keep(noClaims)
	if n := offer(fx.fam, fx.s); n != 1 {
		t.Errorf("offer %d with 101 cancelled and 102 gone, want 1", n)
	}
	// 103 moves to another class: taken only once this one let it go.
	other := test.NodeClass("robot-b", func(nc *v1alpha1.TofuNodeClass) {
		nc.Spec.Family = v1alpha1.FamilyRobot
		nc.Spec.Robot = &v1alpha1.RobotPool{Servers: servers("ax41", 103), Warm: int32p(0)}
		nc.Spec.NodeTypes = []v1alpha1.NodeType{test.NodeType("ax41")}
	})
	if err := fx.s.Writer.Create(fx.ctx, other.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	otherScope := fx.s
	otherScope.Class = other
	r, err := fx.fam.Keep(fx.ctx, otherScope, noClaims)
	fx.fam.Wait()
	if err != nil || !strings.Contains(r.Message, "server 103 is in the pool of class robot") {
		t.Errorf("the other class's report = %+v, %v", r, err)
	}
	if n := offer(fx.fam, otherScope); n != 0 {
		t.Errorf("the other class offers %d while 103 is this one's", n)
	}
	fx.edit(func(p *v1alpha1.RobotPool) { p.Servers = servers("ax41", 101, 102) })
	if n := offer(fx.fam, fx.s); n != 0 {
		t.Errorf("offer %d after 103 was removed, want 0", n)
	}
	fx.keep(noClaims)
	if _, err := fx.fam.Keep(fx.ctx, otherScope, noClaims); err != nil {
		t.Fatal(err)
	}
	fx.fam.Wait()
	if n := offer(fx.fam, otherScope); n != 1 {
		t.Errorf("the other class offers %d, want 103", n)
	}
	if it := fx.item("103"); it.Attributes[AttrClass] != "robot-b" {
		t.Errorf("server 103: %+v, want in robot-b's pool", it)
	}
}

// TestKeeperProbesUnverifiedUntilQuarantine (issue 25, defect 6): the keeper probes at the
// address the account's listing gave (no webservice read per probe), and an unverified
// server that never answers is not probed forever: after the cold activation time and the
// install's budget its second failure quarantines it.
func TestKeeperProbesUnverifiedUntilQuarantine(t *testing.T) {
	m := newFakeMachines(101)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101), Warm: int32p(0)}, m)
	fx.keep(noClaims)
	if err := fx.inv.SetAttributes(fx.ctx, "101", "", map[string]string{AttrState: StateUnverified, AttrHostKey: "ssh-ed25519 KEY101",
		AttrFailures: "1", AttrLastFailure: robotrules.ReasonNotStandby}); err != nil {
		t.Fatal(err)
	}
	m.hostKey[101] = "ssh-ed25519 KEY101" // it does not answer: no state
	for range 3 {
		fx.keep(noClaims)
	}
	if it := fx.item("101"); it.Quarantined() || it.Attributes[AttrFailures] != "1" {
		t.Fatalf("an unverified server that has not answered for a while: %+v", it)
	}
	fx.now = fx.now.Add(fx.nc.Spec.Robot.ColdActivationOrDefault().Duration + backgroundBudget + time.Minute)
	fx.keep(noClaims)
	r := fx.keep(noClaims)
	if it := fx.item("101"); !it.Quarantined() || !strings.Contains(it.QuarantineReason, robotrules.ReasonNotStandby) {
		t.Fatalf("an unverified server silent past its time: %+v, want quarantined", it)
	}
	if r.Reason != v1alpha1.ReasonServersQuarantined {
		t.Errorf("report = %+v", r)
	}
	probes := len(m.probes)
	fx.keep(noClaims)
	if len(m.probes) != probes {
		t.Errorf("a quarantined server is probed")
	}
}

// A server whose provider ID a Node or NodeClaim still carries (family.Scope.Occupied) is
// neither offered nor leased; a claim that holds it already gets it again.
func TestOccupiedServersAreNotOfferedOrLeased(t *testing.T) {
	m := newFakeMachines(101, 102)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: servers("ax41", 101, 102), Warm: int32p(0)}, m)
	fx.keep(noClaims)
	fx.standby(101, 102)
	busy := map[string]bool{"hrobot://101": true}
	fx.s.Occupied = func(_ context.Context, id string) (bool, error) { return busy[id], nil }

	if counts, err := fx.fam.Offer(fx.ctx, fx.s); err != nil || counts["ax41"] != 1 {
		t.Fatalf("offer %v, %v with 101 occupied: want ax41 1", counts, err)
	}
	first := family.PoolClaim{Name: "c0", UID: "u0", NodeType: "ax41"}
	if lease, err := fx.fam.Lease(fx.ctx, fx.s, first); err != nil || lease.Parameters["server_number"] != "102" {
		t.Fatalf("lease with 101 occupied: %+v, %v; want 102", lease, err)
	}
	_, err := fx.fam.Lease(fx.ctx, fx.s, family.PoolClaim{Name: "c1", UID: "u1", NodeType: "ax41"})
	if !errors.Is(err, family.ErrPoolExhausted) || !strings.Contains(err.Error(), "servers 101 are free but their previous Nodes or NodeClaims still exist") {
		t.Fatalf("second lease: %v, want ErrPoolExhausted naming occupied server 101", err)
	}
	if it := fx.item("101"); it.Leased() {
		t.Errorf("occupied server 101 leased to %s", it.Holder)
	}
	// The claim's own Node carries its server's provider ID: leasing again is unaffected.
	busy["hrobot://102"] = true
	if lease, err := fx.fam.Lease(fx.ctx, fx.s, first); err != nil || lease.Parameters["server_number"] != "102" {
		t.Errorf("lease again with the claim's own server occupied: %+v, %v; want 102", lease, err)
	}
	fx.s.Occupied = func(context.Context, string) (bool, error) { return false, errors.New("cache not synced") }
	if _, err := fx.fam.Offer(fx.ctx, fx.s); err == nil || !strings.Contains(err.Error(), "cache not synced") {
		t.Errorf("offer with Occupied failing: %v, want its error", err)
	}
}
