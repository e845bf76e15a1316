// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// controller is one controller process's view of the inventory: its own client to the API
// server (no shared cache, no shared connection).
func controller(t *testing.T, cp *testenv.ControlPlane, namespace string) statelock.LeasePool {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return statelock.LeasePool{Reader: c, Writer: c, Namespace: namespace, Pool: "robot"}
}

// TestInventoryLeases races two controllers of many workers for a pool smaller than the
// burst, against the real API server, then checks release, restart and quarantine.
func TestInventoryLeases(t *testing.T) {
	cp := testenv.StartT(t, testenv.Options{})
	ctx := context.Background()
	const ns = "fulfiller-inventory"
	a := controller(t, cp, ns)
	if err := a.Writer.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	b := controller(t, cp, ns)
	servers := []string{"321", "322", "323", "324", "325"}
	if err := a.Ensure(ctx, servers...); err != nil {
		t.Fatal(err)
	}
	// A second Ensure (the other controller, or a restart) changes nothing.
	if err := b.Ensure(ctx, servers...); err != nil {
		t.Fatal(err)
	}

	// The burst: 48 claims, half through each controller, all at once, for 5 servers.
	const claims = 48
	type outcome struct {
		holder, item string
		err          error
	}
	results := make(chan outcome, claims)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range claims {
		inv := a
		if i%2 == 1 {
			inv = b
		}
		holder := statelock.LeaseHolder(fmt.Sprintf("claim-%02d", i), fmt.Sprintf("uid-%02d", i))
		candidates := append([]string(nil), servers...)
		if i%3 == 0 { // some prefer other servers, most contend for the same first one
			rand.Shuffle(len(candidates), func(x, y int) { candidates[x], candidates[y] = candidates[y], candidates[x] })
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			item, err := inv.AcquireAny(ctx, holder, candidates)
			results <- outcome{holder, item, err}
		}()
	}
	close(start)
	wg.Wait()
	close(results)

	won := map[string]string{} // item → holder
	failed := 0
	for r := range results {
		switch {
		case r.err == nil:
			if prev, dup := won[r.item]; dup {
				t.Errorf("server %s was leased twice: to %s and %s", r.item, prev, r.holder)
			}
			won[r.item] = r.holder
		case errors.Is(r.err, statelock.ErrNoFreeItem):
			failed++
		default:
			t.Errorf("%s: unexpected error %v", r.holder, r.err)
		}
	}
	if len(won) != len(servers) || failed != claims-len(servers) {
		t.Fatalf("%d claims got a server and %d found none; want %d and %d", len(won), failed, len(servers), claims-len(servers))
	}
	// What the API server holds agrees, read by a third client.
	var leases coordinationv1.LeaseList
	if err := controller(t, cp, ns).Reader.List(ctx, &leases, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		id := l.Labels[statelock.LabelInventoryItem]
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != won[id] {
			t.Errorf("lease %s is held by %v, the winner was %s", l.Name, l.Spec.HolderIdentity, won[id])
		}
	}

	// A restarted controller (a new client) repeating a claim's acquisition gets the same
	// server back; a new claim gets none.
	restarted := controller(t, cp, ns)
	holder := won["323"]
	if got, err := restarted.AcquireAny(ctx, holder, servers); err != nil || got != "323" {
		t.Errorf("after a restart %s acquired %q, %v; want its server 323", holder, got, err)
	}
	if _, err := restarted.AcquireAny(ctx, statelock.LeaseHolder("late", "uid-late"), servers); !errors.Is(err, statelock.ErrNoFreeItem) {
		t.Errorf("a claim after the pool is used up: %v, want ErrNoFreeItem", err)
	}
	// The same claim name with a new UID is another claim.
	name := holder[:len("claim-00")]
	if err := restarted.Acquire(ctx, "323", statelock.LeaseHolder(name, "another-uid")); !errors.Is(err, statelock.ErrItemHeld) {
		t.Errorf("a new claim of the old name took 323: %v", err)
	}

	// Only the holder releases.
	if err := restarted.Release(ctx, "323", statelock.LeaseHolder("late", "uid-late"), nil); !errors.Is(err, statelock.ErrNotHolder) {
		t.Errorf("a stranger released 323: %v", err)
	}
	if err := restarted.Release(ctx, "323", holder, map[string]string{"state": "reinstalling"}); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Release(ctx, "323", holder, nil); !errors.Is(err, statelock.ErrNotHolder) {
		t.Errorf("releasing twice: %v, want ErrNotHolder", err)
	}
	it, err := restarted.Get(ctx, "323")
	if err != nil || !it.Free() || it.Attributes["state"] != "reinstalling" {
		t.Fatalf("323 after release: %+v, %v", it, err)
	}

	// Quarantine: not offered until cleared; the attribute guard needs the item free.
	if err := a.Quarantine(ctx, "323", "activation failed twice: installimage exited with status 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireAny(ctx, statelock.LeaseHolder("late", "uid-late"), servers); !errors.Is(err, statelock.ErrNoFreeItem) {
		t.Errorf("a quarantined server was offered: %v", err)
	}
	if err := b.Acquire(ctx, "323", statelock.LeaseHolder("late", "uid-late")); !errors.Is(err, statelock.ErrQuarantined) {
		t.Errorf("acquiring a quarantined server: %v", err)
	}
	items, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var free, leased, quarantined int
	for _, it := range items {
		switch {
		case it.Quarantined():
			quarantined++
			if it.QuarantineReason == "" || it.QuarantinedAt.IsZero() {
				t.Errorf("quarantined item without reason or time: %+v", it)
			}
		case it.Leased():
			leased++
		case it.Free():
			free++
		}
	}
	if free != 0 || leased != 4 || quarantined != 1 {
		t.Errorf("free %d, leased %d, quarantined %d; want 0, 4, 1", free, leased, quarantined)
	}
	if err := b.SetAttributes(ctx, "323", "", map[string]string{"state": "standby"}); err != nil {
		t.Errorf("setting attributes of a free item: %v", err)
	}
	if err := b.SetAttributes(ctx, "321", "", map[string]string{"state": "standby"}); !errors.Is(err, statelock.ErrNotHolder) {
		t.Errorf("unguarded attributes written on a leased item: %v", err)
	}
	if err := a.Unquarantine(ctx, "323"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.AcquireAny(ctx, statelock.LeaseHolder("late", "uid-late"), servers); err != nil || got != "323" {
		t.Errorf("after clearing the quarantine: %q, %v", got, err)
	}
	if err := a.Acquire(ctx, "999", holder); !errors.Is(err, statelock.ErrUnknownItem) {
		t.Errorf("acquiring an item with no lease: %v", err)
	}
}
