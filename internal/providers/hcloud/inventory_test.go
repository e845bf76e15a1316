// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
)

// TestInventory lists the stand-in's servers by this cluster's label: a server of another
// cluster, or one without labels, is never listed; a listed server is attributed to its
// claim, class and NodePool; Delete deletes it, and refuses a server whose labels changed
// since it was listed.
func TestInventory(t *testing.T) {
	s := standin.StartT(t, standin.Options{})
	c := hcloudClient(s)
	ctx := context.Background()
	create := func(name string, labels map[string]string) int64 {
		t.Helper()
		res, _, err := c.Server.Create(ctx, hcloud.ServerCreateOpts{Name: name, ServerType: &hcloud.ServerType{Name: "cx23"},
			Image: &hcloud.Image{Name: "ubuntu-24.04"}, Location: &hcloud.Location{Name: "fsn1"}, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		// A server is locked while its create runs: wait, as the collector's next pass would.
		if err := c.Action.WaitFor(ctx, res.Action); err != nil {
			t.Fatal(err)
		}
		return res.Server.ID
	}
	ours := create("ours", map[string]string{"fulfiller.sh/cluster": "prod-eu", "karpenter.sh/nodeclaim": "claim-a",
		"fulfiller.sh/nodeclass": "hcloud", "karpenter.sh/nodepool": "default"})
	older := create("older", map[string]string{"fulfiller.sh/cluster": "prod-eu", "fulfiller.sh/node": "claim-b"})
	foreign := create("foreign", map[string]string{"fulfiller.sh/cluster": "staging", "karpenter.sh/nodeclaim": "claim-c"})
	bare := create("bare", nil)

	f := NewFamily()
	scope := family.Scope{Env: map[string]string{EnvToken: s.Token(), EnvEndpoint: s.Endpoint()}, Cluster: "prod-eu"}
	machines, err := f.List(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range machines {
		names = append(names, m.Name)
		if m.Cluster != "prod-eu" || time.Since(m.Created) > time.Minute {
			t.Errorf("machine %+v", m)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"older", "ours"}) {
		t.Fatalf("listed %v, want this cluster's servers only", names)
	}
	i := slices.IndexFunc(machines, func(m family.Machine) bool { return m.Name == "ours" })
	m := machines[i]
	if m.ID != strconv.FormatInt(ours, 10) || m.Claim != "claim-a" || m.Class != "hcloud" || m.NodePool != "default" || m.ProviderID != "hcloud://"+m.ID {
		t.Errorf("ours = %+v", m)
	}
	if o := machines[1-i]; o.Claim != "claim-b" {
		t.Errorf("a server labelled with fulfiller.sh/node only is attributed to claim %q", o.Claim)
	}
	if none, err := f.List(ctx, family.Scope{Env: scope.Env}); err != nil || len(none) != 0 {
		t.Errorf("without a cluster name: %v, %v", none, err)
	}

	// Relabelled since it was listed: not deleted.
	if _, _, err := c.Server.Update(ctx, &hcloud.Server{ID: older}, hcloud.ServerUpdateOpts{Labels: map[string]string{"fulfiller.sh/cluster": "staging"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx, scope, machines[1-i]); err == nil {
		t.Error("a server relabelled as another cluster's was deleted")
	}
	if err := f.Delete(ctx, scope, m); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, exists := s.Server(ours)
		if !exists {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted server is still there")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range []int64{older, foreign, bare} {
		if _, ok := s.Server(id); !ok {
			t.Errorf("server %d was deleted", id)
		}
	}
	// Deleting a server that is gone already is done.
	if err := f.Delete(ctx, scope, m); err != nil {
		t.Errorf("deleting a deleted server: %v", err)
	}
}

// TestInventoryCreatedAtTheLatest (issue 25, defect 14): the API gives a server's creation
// time to the second, as Hetzner's does; a listed machine's Created is the latest moment the
// server could have been created, never before its exact creation, so that the orphan
// collector's grace period is never cut short.
func TestInventoryCreatedAtTheLatest(t *testing.T) {
	s := standin.StartT(t, standin.Options{})
	c := hcloudClient(s)
	ctx := context.Background()
	for i := range 3 {
		res, _, err := c.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "srv-" + strconv.Itoa(i), ServerType: &hcloud.ServerType{Name: "cx23"},
			Image: &hcloud.Image{Name: "ubuntu-24.04"}, Location: &hcloud.Location{Name: "fsn1"},
			Labels: map[string]string{"fulfiller.sh/cluster": "prod-eu", "karpenter.sh/nodeclaim": "claim-" + strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Action.WaitFor(ctx, res.Action); err != nil {
			t.Fatal(err)
		}
	}
	exact := map[string]time.Time{}
	for _, srv := range s.Servers() {
		exact[strconv.FormatInt(srv.ID, 10)] = srv.Created
	}
	machines, err := NewFamily().List(ctx, family.Scope{Env: map[string]string{EnvToken: s.Token(), EnvEndpoint: s.Endpoint()}, Cluster: "prod-eu"})
	if err != nil {
		t.Fatal(err)
	}
	if len(machines) != 3 {
		t.Fatalf("listed %d machines, want 3", len(machines))
	}
	for _, m := range machines {
		created := exact[m.ID]
		if m.Created.Before(created) || m.Created.After(created.Add(time.Second)) {
			t.Errorf("machine %s: Created %s, want within a second after its exact creation %s", m.Name, m.Created.Format(time.RFC3339Nano), created.Format(time.RFC3339Nano))
		}
	}
}
