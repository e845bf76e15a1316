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
}

func newFakeMachines(numbers ...int) *fakeMachines {
	m := &fakeMachines{state: map[int]string{}, hostKey: map[int]string{}, failInst: map[int]bool{}}
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

func (m *fakeMachines) Probe(_ context.Context, server int, hostKey string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if got := m.hostKey[server]; got != hostKey {
		return "", &HostKeyMismatchError{Addr: fmt.Sprint(server), Want: hostKey, Got: got}
	}
	st, ok := m.state[server]
	if !ok {
		return "", errors.New("connection refused")
	}
	return st, nil
}

func (m *fakeMachines) InstallStandby(ctx context.Context, server int, rec Recorder) error {
	m.mu.Lock()
	m.installs = append(m.installs, server)
	fail := m.failInst[server]
	m.mu.Unlock()
	key := fmt.Sprintf("ssh-ed25519 KEY%d", server)
	if err := rec.Record(ctx, server, map[string]string{AttrHostKey: key, AttrState: StateReinstalling}); err != nil {
		return err
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
	inv statelock.Inventory
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
	return fx
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
	r := fx.keep(noClaims)
	r = fx.keep(noClaims) // the probe ran in the background; this round reports it
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

// A server released after a failed cold activation (its destroy runs no reinstall) is fresh
// again: the keeper installs it anew, and its failure stays counted.
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
