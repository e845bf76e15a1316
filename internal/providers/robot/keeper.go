// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
)

// Machines is what the pool keeper does to servers: read the account's servers, ask an
// installed system its state over SSH (pinned to its recorded host key, at the address the
// account's listing gives: no webservice request), and install a server as a standby
// (rescue, reset, installimage detached; the new host key recorded first) — only while the
// webservice still describes it as the listing did.
type Machines interface {
	Servers(ctx context.Context) ([]Server, error)
	Probe(ctx context.Context, srv Server, hostKey string) (string, error)
	InstallStandby(ctx context.Context, srv Server, rec Recorder) error
}

// Defaults of an install the keeper starts, as the module's (parameters image and drives).
const (
	defaultImage  = "/root/.oldroot/nfs/images/Ubuntu-2404-noble-amd64-base.tar.gz"
	defaultDrives = "/dev/sda,/dev/sdb"
)

// How long the keeper trusts its reading of the account's servers, and how long a
// background install or probe may take.
const (
	accountTTL       = 5 * time.Minute
	backgroundBudget = 15 * time.Minute
	probeBudget      = 20 * time.Second
	// releaseBudget bounds giving an install's lease back after the keeper stopped.
	releaseBudget = 10 * time.Second
)

// keeperState is what the family remembers between Keep calls: the account's servers and the
// Machines of each class, the servers it works on, when it first saw a server reinstalling or
// unverified, and the quarantines it has reported. holder is the lease holder of this
// keeper's installs: keeperHolder and an identity of this process, so that a lease an earlier
// process (a restarted controller, a former leader) left is told from one in flight here.
type keeperState struct {
	holder    string
	mu        sync.Mutex
	machines  map[string]Machines
	accounts  map[string]cachedAccount
	inflight  map[string]bool
	firstSeen map[string]time.Time
	reported  map[string]bool
	wg        sync.WaitGroup
}

type cachedAccount struct {
	servers []Server
	at      time.Time
}

func (f *Family) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Family) state() *keeperState {
	f.once.Do(func() {
		id := make([]byte, 4)
		_, _ = rand.Read(id) // crypto/rand does not fail
		f.keeper = &keeperState{holder: keeperHolder + "/" + hex.EncodeToString(id),
			machines: map[string]Machines{}, accounts: map[string]cachedAccount{},
			inflight: map[string]bool{}, firstSeen: map[string]time.Time{}, reported: map[string]bool{}}
	})
	return f.keeper
}

// isKeeperHolder reports whether holder is a pool keeper's, this process's or another's.
func isKeeperHolder(holder string) bool {
	return holder == keeperHolder || strings.HasPrefix(holder, keeperHolder+"/")
}

// Wait waits for the keeper's background work (tests).
func (f *Family) Wait() { f.state().wg.Wait() }

// machinesFor returns the class's Machines, one per class generation and credentials, so
// that its Robot client's request budgets hold across Keep calls.
func (f *Family) machinesFor(s family.Scope) (Machines, error) {
	ks := f.state()
	key := fmt.Sprintf("%s/%d/%s", s.Class.UID, s.Class.Generation, family.EnvDigest(s.Env))
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if m, ok := ks.machines[key]; ok {
		return m, nil
	}
	newMachines := f.NewMachines
	if newMachines == nil {
		newMachines = ActivatorMachines
	}
	m, err := newMachines(s)
	if err != nil {
		return nil, err
	}
	for k := range ks.machines {
		if strings.HasPrefix(k, string(s.Class.UID)+"/") {
			delete(ks.machines, k) // an earlier generation's or credentials'
		}
	}
	ks.machines[key] = m
	return m, nil
}

// ActivatorMachines are the Machines of a class: its Robot credentials and SSH key
// (spec.credentials) and where SSH is reached (spec.variables ssh_host, ssh_port).
func ActivatorMachines(s family.Scope) (Machines, error) {
	c, signer, err := clientAndSigner(func(k string) string { return s.Env[k] })
	if err != nil {
		return nil, err
	}
	vars := s.Class.Spec.Variables
	a := &Activator{Client: c, Signer: signer, SSHHost: vars["ssh_host"]}
	if p, err := strconv.Atoi(vars["ssh_port"]); err == nil {
		a.SSHPort = p
	}
	if d, err := time.ParseDuration(vars["poll_interval"]); err == nil {
		a.PollInterval = d
	}
	if d, err := time.ParseDuration(vars["rescue_timeout"]); err == nil {
		a.RescueTimeout = d
	}
	image := vars["release_image"]
	if image == "" {
		image = vars["image"]
	}
	if image == "" {
		image = defaultImage
	}
	drives := vars["drives"]
	if drives == "" {
		drives = defaultDrives
	}
	return &activatorMachines{a: a, pool: s.Class.Spec.Robot, image: image, drives: strings.Split(drives, ",")}, nil
}

type activatorMachines struct {
	a      *Activator
	pool   *v1alpha1.RobotPool
	image  string
	drives []string
}

// activator is the Activator of one server: reached at its declared SSH address, if any.
func (m *activatorMachines) activator(server int) *Activator {
	a := *m.a
	if host, port, err := net.SplitHostPort(m.pool.SSHAddressOf(server)); err == nil {
		a.SSHHost = host
		if p, err := strconv.Atoi(port); err == nil {
			a.SSHPort = p
		}
	}
	return &a
}

func (m *activatorMachines) Servers(ctx context.Context) ([]Server, error) {
	return m.a.Client.ListServers(ctx)
}

func (m *activatorMachines) Probe(ctx context.Context, srv Server, hostKey string) (string, error) {
	return m.activator(srv.Number).ProbeAt(ctx, srv, hostKey)
}

func (m *activatorMachines) InstallStandby(ctx context.Context, srv Server, rec Recorder) error {
	a := m.activator(srv.Number)
	a.Recorder = rec
	listed := srv
	_, err := a.Release(ctx, Release{Server: srv.Number, Image: m.image, Drives: m.drives, Expect: &listed})
	return err
}

// CheckCredentials reads the account's servers with the class's credentials.
func (f *Family) CheckCredentials(ctx context.Context, s family.Scope) error {
	m, err := f.machinesFor(s)
	if err == nil {
		_, err = m.Servers(ctx)
	}
	if errors.Is(err, ErrInvalidCredentials) {
		return family.Errorf(v1alpha1.ReasonInvalidCredentials, "%s", err.Error())
	}
	return err
}

// poolMembers are the servers of the class's pool by number, with their node types, and what
// is wrong with the declaration.
func poolMembers(nc *v1alpha1.TofuNodeClass, servers []Server) (map[string]string, []string) {
	inAccount := map[int]Server{}
	for _, srv := range servers {
		inAccount[srv.Number] = srv
	}
	want := map[string]string{}
	var problems []string
	add := func(n int, nodeType string) {
		id := strconv.Itoa(n)
		if _, ok := nc.NodeType(nodeType); !ok {
			problems = append(problems, fmt.Sprintf("server %d: node type %s is not in spec.nodeTypes", n, nodeType))
			return
		}
		if prev, dup := want[id]; dup && prev != nodeType {
			problems = append(problems, fmt.Sprintf("server %d is declared as %s and %s", n, prev, nodeType))
			return
		}
		want[id] = nodeType
	}
	if nc.Spec.Robot == nil {
		return want, []string{"a robot class needs spec.robot: its servers"}
	}
	for _, d := range nc.Spec.Robot.Servers {
		srv, ok := inAccount[int(d.Number)]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("server %d is not in the Robot account", d.Number))
		case srv.Cancelled:
			problems = append(problems, fmt.Sprintf("server %d is cancelled", d.Number))
		default:
			add(int(d.Number), d.NodeType)
		}
	}
	for i, d := range nc.Spec.Robot.Discover {
		if !d.HasSelector() {
			// The API server refuses it; a CRD older than that rule lets it through. Taking
			// every server of the account would reinstall servers the pool was never given.
			problems = append(problems, fmt.Sprintf("spec.robot.discover[%d] has neither namePrefix nor product and selects nothing: it would take every server of the Robot account", i))
			continue
		}
		for _, srv := range servers {
			if srv.Cancelled || (d.NamePrefix != "" && !strings.HasPrefix(srv.Name, d.NamePrefix)) || (d.Product != "" && srv.Product != d.Product) {
				continue
			}
			add(srv.Number, d.NodeType)
		}
	}
	return want, problems
}

// Keep looks after the class's pool: it creates the servers' leases and marks the members
// of the pool (a server that left it is offered no more), releases leases of claims that are
// gone and installs an earlier keeper left, probes servers reinstalling (back to standby) or
// unverified, counts their failures and quarantines at the second, and installs fresh servers
// ahead of need to keep spec.robot.warm per node type in standby. Its background work ends
// with ctx (the leader's).
func (f *Family) Keep(ctx context.Context, s family.Scope, live func(ctx context.Context, claim, uid string) (bool, error)) (family.PoolReport, error) {
	m, err := f.machinesFor(s)
	if err != nil {
		return family.PoolReport{Reason: v1alpha1.ReasonPoolUnchecked, Message: "the pool cannot be looked after: " + err.Error()}, nil
	}
	servers, err := f.account(ctx, s, m)
	if err != nil {
		return family.PoolReport{Reason: v1alpha1.ReasonPoolUnchecked, Message: "reading the Robot account's servers: " + err.Error()}, nil
	}
	want, problems := poolMembers(s.Class, servers)
	inv := inventory(s)
	items, err := inv.List(ctx)
	if err != nil {
		return family.PoolReport{}, err
	}
	joined, more, err := f.join(ctx, s, inv, items, want)
	if err != nil {
		return family.PoolReport{}, err
	}
	problems = append(problems, more...)
	left, err := f.leave(ctx, s, inv, items, want)
	if err != nil {
		return family.PoolReport{}, err
	}
	if joined+left > 0 {
		if items, err = inv.List(ctx); err != nil {
			return family.PoolReport{}, err
		}
	}
	listed := map[string]Server{}
	for _, srv := range servers {
		listed[strconv.Itoa(srv.Number)] = srv
	}
	ks := f.state()
	mine := members(items, s.Class.Name)
	for i := range mine {
		it := &mine[i]
		switch state := it.Attributes[AttrState]; {
		case isKeeperHolder(it.Holder):
			if it.Holder == ks.holder && f.inFlight(it.ID) {
				continue
			}
			// An install an earlier keeper left (a restarted controller, a former leader), or
			// one whose release failed: released with what it recorded. A server whose reinstall
			// started is followed to standby by the probe (and counted failed if it never gets
			// there); one that recorded nothing yet is fresh and installed anew.
			if err := ignoreNotHolder(inv.Release(ctx, it.ID, it.Holder, nil)); err != nil {
				return family.PoolReport{}, err
			}
			it.Holder = ""
		case it.Leased():
			if err := f.sweep(ctx, inv, *it, live); err != nil {
				return family.PoolReport{}, err
			}
		case it.Quarantined():
		case state == StateInstalling || state == StateActive:
			// Released without a reinstall after an activation that failed (the destroy of a
			// node of the 0.1.0 module skipped it for a tainted resource; the failure is
			// counted): installed anew ahead of need.
			if err := ignoreNotHolder(inv.SetAttributes(ctx, it.ID, "", map[string]string{AttrState: ""})); err != nil {
				return family.PoolReport{}, err
			}
			it.Attributes[AttrState] = ""
		case state == StateReinstalling || state == StateUnverified:
			if srv, ok := listed[it.ID]; ok {
				// The check runs beside this round and writes its item's attributes: it gets a
				// copy of them, not the map this round goes on reading.
				item := *it
				item.Attributes = maps.Clone(it.Attributes)
				f.background(ctx, it.ID, func(ctx context.Context) error { return f.check(ctx, s, m, item, srv) })
			}
		}
	}
	f.installAhead(ctx, s, m, mine, want, listed)
	return f.report(s, mine, problems), nil
}

// join marks the members of the pool as the class's: class, node type and the pool digest
// they are members under (candidates offers only those). A server in the pool of another
// class is a problem, unless that class is gone. A leased server is left as it is until its
// release. It returns how many leases it wrote.
func (f *Family) join(ctx context.Context, s family.Scope, inv statelock.LeasePool, items []statelock.Item, want map[string]string) (int, []string, error) {
	byID := map[string]statelock.Item{}
	for _, it := range items {
		byID[it.ID] = it
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return number(ids[a]) < number(ids[b]) })
	digest := poolDigest(s.Class)
	var problems []string
	written := 0
	for _, id := range ids {
		it, ok := byID[id]
		if !ok {
			if err := inv.Ensure(ctx, id); err != nil {
				return written, nil, err
			}
			written++
		}
		owner := it.Attributes[AttrClass]
		if owner != "" && owner != s.Class.Name {
			gone, err := classGone(ctx, s, owner)
			if err != nil {
				return written, nil, err
			}
			if !gone || it.Leased() {
				problems = append(problems, fmt.Sprintf("server %s is in the pool of class %s", id, owner))
				continue
			}
			owner = "" // the class whose pool it was is deleted
		}
		if it.Leased() || owner != "" && it.Attributes[AttrNodeType] == want[id] && it.Attributes[AttrPool] == digest {
			continue
		}
		err := inv.SetAttributes(ctx, id, "", map[string]string{AttrClass: s.Class.Name, AttrNodeType: want[id], AttrPool: digest})
		if err != nil && !errors.Is(err, statelock.ErrNotHolder) {
			return written, nil, err
		}
		written++
	}
	return written, problems, nil
}

// leave gives up the free servers of the class that are no longer members of its pool
// (removed from spec.robot, cancelled, gone from the account, their node type removed): they
// are offered no more, and another class may take them. A leased one leaves after its
// release. It returns how many leases it wrote.
func (f *Family) leave(ctx context.Context, s family.Scope, inv statelock.LeasePool, items []statelock.Item, want map[string]string) (int, error) {
	written := 0
	for _, it := range items {
		if it.Attributes[AttrClass] != s.Class.Name || want[it.ID] != "" || it.Leased() {
			continue
		}
		err := inv.SetAttributes(ctx, it.ID, "", map[string]string{AttrClass: "", AttrNodeType: "", AttrPool: ""})
		if err := ignoreNotHolder(err); err != nil {
			return written, err
		}
		written++
	}
	return written, nil
}

// classGone reports whether the class named name no longer exists.
func classGone(ctx context.Context, s family.Scope, name string) (bool, error) {
	err := s.Reader.Get(ctx, client.ObjectKey{Name: name}, &v1alpha1.TofuNodeClass{})
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err):
		return true, nil
	}
	return false, fmt.Errorf("reading nodeclass %s: %w", name, err)
}

// account reads the account's servers, at most every accountTTL per set of credentials: the
// classes of one webservice user share the reading, and its GET /server budget.
func (f *Family) account(ctx context.Context, s family.Scope, m Machines) ([]Server, error) {
	ks := f.state()
	key := family.EnvDigest(s.Env)
	ks.mu.Lock()
	hit, ok := ks.accounts[key]
	ks.mu.Unlock()
	if ok && f.now().Sub(hit.at) < accountTTL {
		return hit.servers, nil
	}
	servers, err := m.Servers(ctx)
	if err != nil {
		return nil, err
	}
	ks.mu.Lock()
	ks.accounts[key] = cachedAccount{servers: servers, at: f.now()}
	ks.mu.Unlock()
	return servers, nil
}

// forgetAccount drops the reading of the class's account: the next Keep reads it again.
func (f *Family) forgetAccount(s family.Scope) {
	ks := f.state()
	ks.mu.Lock()
	delete(ks.accounts, family.EnvDigest(s.Env))
	ks.mu.Unlock()
}

// sweep releases a lease whose claim is gone (a controller that stopped between leasing and
// recording, or between destroying and releasing). A server the gone claim had activated is
// not provably in standby: it is quarantined.
func (f *Family) sweep(ctx context.Context, inv statelock.LeasePool, it statelock.Item, live func(ctx context.Context, claim, uid string) (bool, error)) error {
	name, uid, _ := strings.Cut(it.Holder, "/")
	alive, err := live(ctx, name, uid)
	if err != nil || alive {
		return err
	}
	if state := it.Attributes[AttrState]; state == StateActive || state == StateInstalling {
		if err := inv.Quarantine(ctx, it.ID, fmt.Sprintf("LeaseOrphaned: claim %s is gone while the server was %s", name, state)); err != nil {
			return err
		}
	}
	if err := inv.Release(ctx, it.ID, it.Holder, nil); err != nil && !errors.Is(err, statelock.ErrNotHolder) {
		return err
	}
	return nil
}

// check probes a free server that is reinstalling or unverified, over SSH at its listed
// address: standby puts it back into service; another state or host key is a failure. A
// reinstall that has not reached standby, or an unverified server that has not answered,
// after the cold activation time and its install timeout is one too.
func (f *Family) check(ctx context.Context, s family.Scope, m Machines, it statelock.Item, srv Server) error {
	inv := inventory(s)
	ks := f.state()
	probeCtx, cancel := context.WithTimeout(ctx, probeBudget)
	state, err := m.Probe(probeCtx, srv, it.Attributes[AttrHostKey])
	cancel()
	if ctx.Err() != nil {
		return ctx.Err() // the keeper stopped: nothing was learnt
	}
	var mismatch *HostKeyMismatchError
	switch {
	case err == nil && state == StateStandby:
		f.forget(it.ID)
		attrs := map[string]string{AttrState: StateStandby}
		if it.Attributes[AttrState] == StateReinstalling {
			attrs[AttrFailures], attrs[AttrLastFailure] = "", ""
		}
		return ignoreNotHolder(inv.SetAttributes(ctx, it.ID, "", attrs))
	case it.Attributes[AttrState] == StateUnverified && errors.As(err, &mismatch):
		f.forget(it.ID)
		return f.fail(ctx, inv, it, robotrules.ReasonHostKeyMismatch, "")
	case it.Attributes[AttrState] == StateUnverified && err == nil:
		f.forget(it.ID)
		return f.fail(ctx, inv, it, robotrules.ReasonNotStandby, "")
	}
	// Until the installed system boots, the rescue system (another host key) or nothing
	// answers a reinstalling server; an unverified one may be rebooting: only the time counts.
	ks.mu.Lock()
	first, ok := ks.firstSeen[it.ID]
	if !ok {
		first = f.now()
		ks.firstSeen[it.ID] = first
	}
	ks.mu.Unlock()
	if since(f.now(), first) <= s.Class.Spec.Robot.ColdActivationOrDefault().Duration+backgroundBudget {
		return nil
	}
	f.forget(it.ID)
	reason := robotrules.ReasonInstallFailed
	if it.Attributes[AttrState] == StateUnverified {
		reason = robotrules.ReasonNotStandby
	}
	return f.fail(ctx, inv, it, reason, "")
}

// forget drops when a server was first seen reinstalling or unverified.
func (f *Family) forget(id string) {
	ks := f.state()
	ks.mu.Lock()
	delete(ks.firstSeen, id)
	ks.mu.Unlock()
}

// fail counts a failure of a free server (or one the keeper holds, holder) and quarantines
// it at the second; a reinstall that failed makes it fresh again, to be installed anew.
func (f *Family) fail(ctx context.Context, inv statelock.LeasePool, it statelock.Item, reason, holder string) error {
	attrs := failureAttrs(it, reason)
	if reason == robotrules.ReasonInstallFailed {
		attrs[AttrState] = ""
	}
	if err := inv.SetAttributes(ctx, it.ID, holder, attrs); err != nil {
		return ignoreNotHolder(err)
	}
	it.Attributes[AttrFailures], it.Attributes[AttrLastFailure] = attrs[AttrFailures], reason
	if q := quarantineReason(it); q != "" {
		return inv.Quarantine(ctx, it.ID, q)
	}
	return nil
}

// installAhead installs fresh members of the pool as standbys until each node type has
// spec.robot.warm servers in standby or on their way there. Only a server the account still
// lists is installed, and only while the webservice describes it as the listing did.
func (f *Family) installAhead(ctx context.Context, s family.Scope, m Machines, mine []statelock.Item, want map[string]string, listed map[string]Server) {
	warm := s.Class.Spec.Robot.WarmOrDefault()
	have := map[string]int{}
	idle := map[string][]statelock.Item{}
	for _, it := range mine {
		nt := it.Attributes[AttrNodeType]
		if want[it.ID] == "" || want[it.ID] != nt || it.Quarantined() {
			continue
		}
		switch state := it.Attributes[AttrState]; {
		case isKeeperHolder(it.Holder), warmReady(it), it.Free() && state == StateReinstalling:
			have[nt]++
		case fresh(it):
			if _, ok := listed[it.ID]; ok {
				idle[nt] = append(idle[nt], it)
			}
		}
	}
	for nt, list := range idle {
		for i := 0; i < len(list) && have[nt] < warm; i++ {
			it, srv := list[i], listed[list[i].ID]
			have[nt]++
			f.background(ctx, it.ID, func(ctx context.Context) error { return f.install(ctx, s, m, it, srv) })
		}
	}
}

// install leases a fresh server to this keeper, installs it as a standby and gives it back
// (reinstalling: the next check sees it reach standby). An install the keeper's end
// interrupts is no failure of the server; its lease is given back all the same.
func (f *Family) install(ctx context.Context, s family.Scope, m Machines, it statelock.Item, srv Server) error {
	inv := inventory(s)
	holder := f.state().holder
	if err := inv.Acquire(ctx, it.ID, holder); err != nil {
		return nil // a claim leased it meanwhile, or someone quarantined it
	}
	err := m.InstallStandby(ctx, srv, InventoryRecorder{Inventory: inv, Holder: holder})
	if errors.Is(err, ErrServerChanged) {
		f.forgetAccount(s) // read the account again: the server may have left the pool
	} else if err != nil && ctx.Err() == nil {
		cur, gerr := inv.Get(ctx, it.ID)
		if gerr == nil {
			_ = f.fail(ctx, inv, cur, robotrules.ReasonInstallFailed, holder)
		}
	}
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseBudget)
	defer cancel()
	if rerr := inv.Release(releaseCtx, it.ID, holder, nil); rerr != nil {
		return rerr
	}
	return err
}

// inFlight reports whether this keeper works on the server now.
func (f *Family) inFlight(id string) bool {
	ks := f.state()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.inflight[id]
}

// background runs fn for a server unless work on it is in flight, until ctx ends or
// backgroundBudget has passed.
func (f *Family) background(ctx context.Context, id string, fn func(ctx context.Context) error) {
	ks := f.state()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.inflight[id] {
		return
	}
	ks.inflight[id] = true
	ks.wg.Add(1)
	go func() {
		defer ks.wg.Done()
		ctx, cancel := context.WithTimeout(ctx, backgroundBudget)
		defer cancel()
		_ = fn(ctx) // what fails is recorded on the server's lease, and seen next time
		ks.mu.Lock()
		delete(ks.inflight, id)
		ks.mu.Unlock()
	}()
}

// report is the pool's condition: what is wrong with its declaration, then its quarantined
// servers, then the types offered warm only; events for quarantines not reported before.
func (f *Family) report(s family.Scope, mine []statelock.Item, problems []string) family.PoolReport {
	ks := f.state()
	var quarantined []string
	var events []family.PoolEvent
	for _, it := range mine {
		if !it.Quarantined() {
			continue
		}
		quarantined = append(quarantined, fmt.Sprintf("server %s (%s)", it.ID, it.QuarantineReason))
		key := string(s.Class.UID) + "/" + it.ID + "/" + it.QuarantinedAt.String()
		ks.mu.Lock()
		if !ks.reported[key] {
			ks.reported[key] = true
			events = append(events, family.PoolEvent{Warning: true, Reason: v1alpha1.ReasonServerQuarantined,
				Message: fmt.Sprintf("server %s is quarantined: %s; it is not offered until its lease's %s annotation is removed", it.ID, it.QuarantineReason, "inventory.fulfiller.sh/quarantined")})
		}
		ks.mu.Unlock()
	}
	var warmOnly []string
	for i := range s.Class.Spec.NodeTypes {
		nt := &s.Class.Spec.NodeTypes[i]
		if !coldFits(s.Class, nt) {
			warmOnly = append(warmOnly, nt.Name)
		}
	}
	r := family.PoolReport{Healthy: true, Reason: v1alpha1.ReasonPoolHealthy, Events: events, Machines: machineStates(mine),
		Message: fmt.Sprintf("%d servers; every type is offered warm and cold", len(mine))}
	switch {
	case len(problems) > 0:
		r.Healthy, r.Reason, r.Message = false, v1alpha1.ReasonPoolInvalid, strings.Join(problems, "; ")
	case len(quarantined) > 0:
		r.Healthy, r.Reason, r.Message = false, v1alpha1.ReasonServersQuarantined, strings.Join(quarantined, "; ")+"; not offered until cleared"
	case len(warmOnly) > 0:
		r.Reason = v1alpha1.ReasonColdExceedsWindow
		r.Message = fmt.Sprintf("node types %s: the cold path (%s) and join timeout exceed Karpenter's %s registration window; offered only while servers wait in standby",
			strings.Join(warmOnly, ", "), s.Class.Spec.Robot.ColdActivationOrDefault().Duration, v1alpha1.RegistrationWindow)
	}
	return r
}

// machineStates counts the pool's servers by state (family.PoolReport.Machines).
func machineStates(mine []statelock.Item) map[string]int {
	out := map[string]int{family.PoolFree: 0, family.PoolStandby: 0, family.PoolLeased: 0, family.PoolQuarantined: 0}
	for _, it := range mine {
		switch {
		case it.Quarantined():
			out[family.PoolQuarantined]++
		case it.Leased() && !isKeeperHolder(it.Holder):
			out[family.PoolLeased]++
		case !it.Leased() && it.Attributes[AttrState] == StateStandby:
			out[family.PoolStandby]++
		default: // fresh, or being installed ahead of need
			out[family.PoolFree]++
		}
	}
	return out
}

func ignoreNotHolder(err error) error {
	if errors.Is(err, statelock.ErrNotHolder) {
		return nil
	}
	return err
}
