// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
)

// Attributes of a server's inventory item besides AttrHostKey and AttrState, kept by the
// pool: which class and node type the server is, and its activation failures.
const (
	// AttrClass is the class whose pool the server is in; a server is in one class's pool.
	AttrClass = "class"
	// AttrNodeType is the node type the server is.
	AttrNodeType = "node-type"
	// AttrFailures counts activations and reinstalls that failed in a row; AttrLastFailure is
	// the reason of the last one. Two quarantine the server.
	AttrFailures    = "failures"
	AttrLastFailure = "last-failure"
	// AttrPool is the digest of the pool declaration (poolDigest) under which the keeper last
	// found the server a member of AttrClass's pool. A server is offered only while it is the
	// declaration's now: one removed from spec.robot is not offered from the moment of the
	// edit, nor one whose discover entry changed, until the keeper finds it a member again.
	AttrPool = "pool"
)

// StateUnverified: a warm activation found the server not in standby or presenting another
// host key. It is not provably ours: nothing is installed over it, and the pool keeper
// probes it with the recorded key until it says standby again (or quarantines it).
const StateUnverified = "unverified"

// quarantineAfter is how many failures in a row quarantine a server.
const quarantineAfter = 2

// keeperHolder is the lease holder of a server the pool keeper installs ahead of need.
const keeperHolder = "pool-keeper/" + InventoryPool

func inventory(s family.Scope) statelock.LeasePool {
	return statelock.LeasePool{Reader: s.Reader, Writer: s.Writer, Namespace: s.StateNamespace, Pool: InventoryPool}
}

// members are the items of the class's pool.
func members(items []statelock.Item, class string) []statelock.Item {
	var out []statelock.Item
	for _, it := range items {
		if it.Attributes[AttrClass] == class {
			out = append(out, it)
		}
	}
	return out
}

// warmReady: free, installed by the fulfiller (its host key is recorded) and in standby.
func warmReady(it statelock.Item) bool {
	return it.Free() && it.Attributes[AttrState] == StateStandby && it.Attributes[AttrHostKey] != ""
}

// fresh: free and never installed by the fulfiller; declared in the pool, so the operator has
// said it may be installed.
func fresh(it statelock.Item) bool {
	return it.Free() && it.Attributes[AttrState] == ""
}

// poolDigest identifies what makes a server a member of the class's pool: the declared
// servers and node types, the discover entries, and the class's node types.
func poolDigest(nc *v1alpha1.TofuNodeClass) string {
	h := sha256.New()
	if p := nc.Spec.Robot; p != nil {
		for _, d := range p.Servers {
			fmt.Fprintf(h, "server %d %q\n", d.Number, d.NodeType)
		}
		for _, d := range p.Discover {
			fmt.Fprintf(h, "discover %q %q %q\n", d.NamePrefix, d.Product, d.NodeType)
		}
	}
	names := make([]string, 0, len(nc.Spec.NodeTypes))
	for _, nt := range nc.Spec.NodeTypes {
		names = append(names, nt.Name)
	}
	sort.Strings(names)
	fmt.Fprintf(h, "types %q\n", names)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// coldFits reports whether the class's cold path and the type's join timeout fit Karpenter's
// registration window.
func coldFits(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) bool {
	return nc.Spec.Robot.ColdActivationOrDefault().Duration+nt.JoinTimeoutOrDefault() <= v1alpha1.RegistrationWindow
}

// candidates are the servers of the type a claim may get, warm first (by number), then, when
// the cold path fits the window, fresh ones.
func candidates(nc *v1alpha1.TofuNodeClass, items []statelock.Item, nodeType string) (warm, cold []string) {
	nt, ok := nc.NodeType(nodeType)
	if !ok {
		return nil, nil
	}
	fits := coldFits(nc, nt)
	digest := poolDigest(nc)
	for _, it := range members(items, nc.Name) {
		if it.Attributes[AttrNodeType] != nodeType || it.Attributes[AttrPool] != digest {
			continue
		}
		switch {
		case warmReady(it):
			warm = append(warm, it.ID)
		case fits && fresh(it):
			cold = append(cold, it.ID)
		}
	}
	byNumber := func(ids []string) {
		sort.Slice(ids, func(a, b int) bool { return number(ids[a]) < number(ids[b]) })
	}
	byNumber(warm)
	byNumber(cold)
	return warm, cold
}

func number(id string) int {
	n, _ := strconv.Atoi(id)
	return n
}

// providerID is the provider ID of server id's Node, as Hetzner's cloud controller manager
// names Robot servers.
func providerID(id string) string { return "hrobot://" + id }

// vacant are the servers of ids whose provider ID no Node or NodeClaim carries
// (family.Scope.Occupied), in order; occupied are the others. A released server is back in
// standby seconds after its destroy, while Karpenter may still be terminating its previous
// Node and claim.
func vacant(ctx context.Context, s family.Scope, ids []string) (free, occupied []string, err error) {
	if s.Occupied == nil {
		return ids, nil, nil
	}
	for _, id := range ids {
		busy, err := s.Occupied(ctx, providerID(id))
		if err != nil {
			return nil, nil, fmt.Errorf("looking for the Node of server %s: %w", id, err)
		}
		if busy {
			occupied = append(occupied, id)
		} else {
			free = append(free, id)
		}
	}
	return free, occupied, nil
}

// Offer counts, per node type of the class, the servers a claim could get now.
func (f *Family) Offer(ctx context.Context, s family.Scope) (map[string]int, error) {
	items, err := inventory(s).List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, nt := range s.Class.Spec.NodeTypes {
		warm, cold := candidates(s.Class, items, nt.Name)
		free, _, err := vacant(ctx, s, append(warm, cold...))
		if err != nil {
			return nil, err
		}
		out[nt.Name] = len(free)
	}
	return out, nil
}

// Lease leases the claim a warm server of the type, or, when none is and the cold path fits
// the window, a fresh one to install. A claim holding a server gets it again, of whatever
// type it is: the lease names it.
func (f *Family) Lease(ctx context.Context, s family.Scope, c family.PoolClaim) (family.PoolLease, error) {
	inv := inventory(s)
	holder := statelock.LeaseHolder(c.Name, c.UID)
	items, err := inv.List(ctx)
	if err != nil {
		return family.PoolLease{}, err
	}
	var id string
	for _, it := range items {
		if it.Holder == holder {
			id = it.ID
		}
	}
	if id == "" {
		warm, cold := candidates(s.Class, items, c.NodeType)
		free, occupied, err := vacant(ctx, s, append(warm, cold...))
		if err != nil {
			return family.PoolLease{}, err
		}
		id, err = inv.AcquireAny(ctx, holder, free)
		if errors.Is(err, statelock.ErrNoFreeItem) {
			return family.PoolLease{}, fmt.Errorf("%w: node type %s of class %s has no server in standby%s%s",
				family.ErrPoolExhausted, c.NodeType, s.Class.Name, coldNote(s.Class, c.NodeType), occupiedNote(occupied))
		}
		if err != nil {
			return family.PoolLease{}, err
		}
	}
	it, err := inv.Get(ctx, id)
	if err != nil {
		return family.PoolLease{}, err
	}
	return leaseOf(s, it, holder), nil
}

func coldNote(nc *v1alpha1.TofuNodeClass, nodeType string) string {
	nt, ok := nc.NodeType(nodeType)
	if ok && !coldFits(nc, nt) {
		return fmt.Sprintf(" and its cold path (%s + join %s) exceeds Karpenter's %s registration window",
			nc.Spec.Robot.ColdActivationOrDefault().Duration, nt.JoinTimeoutOrDefault(), v1alpha1.RegistrationWindow)
	}
	return " and none to install cold"
}

func occupiedNote(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return fmt.Sprintf("; servers %s are free but their previous Nodes or NodeClaims still exist", strings.Join(ids, ", "))
}

// leaseOf is the module's parameters of a leased server: warm when it waits in standby, cold
// otherwise.
func leaseOf(s family.Scope, it statelock.Item, holder string) family.PoolLease {
	path := Cold
	if it.Attributes[AttrState] == StateStandby && it.Attributes[AttrHostKey] != "" {
		path = Warm
	}
	params := map[string]string{
		"server_number":       it.ID,
		"activation_path":     string(path),
		"lease_holder":        holder,
		"inventory_namespace": s.StateNamespace,
	}
	if path == Warm {
		params["host_key"] = it.Attributes[AttrHostKey]
	}
	if host, port, err := net.SplitHostPort(s.Class.Spec.Robot.SSHAddressOf(number(it.ID))); err == nil {
		params["ssh_host"], params["ssh_port"] = host, port
	}
	return family.PoolLease{Parameters: params, ProviderID: providerID(it.ID), NodeType: it.Attributes[AttrNodeType]}
}

// Release gives the claim's server back. A server that failed quarantineAfter times in a row
// is quarantined first, with its last failure as the reason.
func (f *Family) Release(ctx context.Context, s family.Scope, c family.PoolClaim) error {
	inv := inventory(s)
	holder := statelock.LeaseHolder(c.Name, c.UID)
	items, err := inv.List(ctx)
	if err != nil {
		return err
	}
	for _, it := range items {
		if it.Holder != holder {
			continue
		}
		if reason := quarantineReason(it); reason != "" {
			if err := inv.Quarantine(ctx, it.ID, reason); err != nil {
				return err
			}
		}
		if err := inv.Release(ctx, it.ID, holder, nil); err != nil && !errors.Is(err, statelock.ErrNotHolder) {
			return err
		}
	}
	return nil
}

// quarantineReason is why the item must be quarantined; empty when it need not.
func quarantineReason(it statelock.Item) string {
	n, _ := strconv.Atoi(it.Attributes[AttrFailures])
	if n < quarantineAfter {
		return ""
	}
	return fmt.Sprintf("%s: failed %d times in a row", it.Attributes[AttrLastFailure], n)
}

// failureAttrs counts one more failure with reason.
func failureAttrs(it statelock.Item, reason string) map[string]string {
	n, _ := strconv.Atoi(it.Attributes[AttrFailures])
	return map[string]string{AttrFailures: strconv.Itoa(n + 1), AttrLastFailure: reason}
}

// since is how long ago t was, zero for the zero time.
func since(now, t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return now.Sub(t)
}
