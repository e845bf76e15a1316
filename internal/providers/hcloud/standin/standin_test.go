// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/hetznercloud/hcloud-go/v2/hcloud/metadata"

	"github.com/fulfiller-sh/fulfiller/internal/apitally"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
)

// The stand-in is checked with hcloud-go, the library the terraform provider is built on, as
// its client: if hcloud-go reads the answers as it reads the real API's, so does the
// provider (module_test.go in the parent package runs the provider itself).

func newClient(s *standin.StandIn, opts ...hcloud.ClientOption) *hcloud.Client {
	return hcloud.NewClient(append([]hcloud.ClientOption{
		hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken(s.Token()),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(50 * time.Millisecond)}),
		hcloud.WithRetryOpts(hcloud.RetryOpts{BackoffFunc: hcloud.ConstantBackoff(10 * time.Millisecond), MaxRetries: 2}),
	}, opts...)...)
}

func quick(t *testing.T, opts standin.Options) *standin.StandIn {
	t.Helper()
	if opts.CreateDuration == 0 {
		opts.CreateDuration = 150 * time.Millisecond
	}
	if opts.ActionDuration == 0 {
		opts.ActionDuration = 100 * time.Millisecond
	}
	return standin.StartT(t, opts)
}

// machines records what the stand-in asks of its machines.
type machines struct {
	mu     sync.Mutex
	events []string
	booted map[int64]standin.Machine
}

func (m *machines) Boot(mc standin.Machine) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.booted == nil {
		m.booted = map[int64]standin.Machine{}
	}
	m.booted[mc.ServerID] = mc
	m.events = append(m.events, fmt.Sprintf("boot %d", mc.ServerID))
	return nil
}

// machine is what the machine of server id booted with.
func (m *machines) machine(id int64) standin.Machine {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.booted[id]
}

func (m *machines) PowerOff(id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, fmt.Sprintf("poweroff %d", id))
	return nil
}

func (m *machines) Remove(id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, fmt.Sprintf("remove %d", id))
	return nil
}

func (m *machines) log() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events)
}

func createOpts(name string) hcloud.ServerCreateOpts {
	return hcloud.ServerCreateOpts{
		Name: name, ServerType: &hcloud.ServerType{Name: "cx23"}, Image: &hcloud.Image{Name: "ubuntu-24.04"},
		Location: &hcloud.Location{Name: "fsn1"},
	}
}

func TestServerLifecycle(t *testing.T) {
	ctx := context.Background()
	m := &machines{}
	s := quick(t, standin.Options{Machines: m})
	c := newClient(s)

	userData := "#cloud-config\nwrite_files:\n- path: /x\n  content: \"tab\\there, ünïcode, <&>\"\n"
	opts := createOpts("node-a")
	opts.UserData = userData
	opts.Labels = map[string]string{"fulfiller.sh/cluster": "c1", "karpenter.sh/nodepool": "default", "empty": ""}
	res, _, err := c.Server.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Server.Status != hcloud.ServerStatusInitializing || res.Action.Command != "create_server" || res.Action.Status != hcloud.ActionStatusRunning {
		t.Errorf("create answered server %s, action %s %s", res.Server.Status, res.Action.Command, res.Action.Status)
	}
	if len(res.NextActions) != 1 || res.NextActions[0].Command != "start_server" || res.RootPassword == "" {
		t.Errorf("next actions %v, root password %q", res.NextActions, res.RootPassword)
	}
	if res.Server.PublicNet.IPv4.IP == nil || res.Server.PublicNet.IPv6.Network == nil || res.Server.Location.Name != "fsn1" ||
		res.Server.ServerType.Cores != 2 || res.Server.Image.Name != "ubuntu-24.04" || res.Server.Created.IsZero() {
		t.Errorf("server = %+v", res.Server)
	}
	if err := c.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...); err != nil {
		t.Fatal(err)
	}
	srv, _, err := c.Server.GetByID(ctx, res.Server.ID)
	if err != nil || srv == nil || srv.Status != hcloud.ServerStatusRunning || srv.Locked {
		t.Fatalf("server after its actions: %+v, %v", srv, err)
	}
	held, ok := s.Server(srv.ID)
	if !ok || string(held.UserData) != userData || held.Labels["karpenter.sh/nodepool"] != "default" || held.ServerType != "cx23" {
		t.Errorf("stand-in holds %+v", held)
	}
	// The start action finishes as the machine powers on: its boot may come a moment later.
	got := m.machine(srv.ID)
	for deadline := time.Now().Add(5 * time.Second); got.ServerID == 0 && time.Now().Before(deadline); got = m.machine(srv.ID) {
		time.Sleep(10 * time.Millisecond)
	}
	if string(got.UserData) != userData || got.Name != "node-a" || got.MetadataURL != s.MetadataURL(srv.ID) ||
		got.PublicIPv4 != srv.PublicNet.IPv4.IP.String() || got.ServerType.Cores != 2 {
		t.Errorf("machine booted with %+v", got)
	}

	// Another server, for the list filters.
	other := createOpts("node-b")
	other.Labels = map[string]string{"fulfiller.sh/cluster": "c2"}
	if _, _, err := c.Server.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts hcloud.ServerListOpts
		want []string
	}{
		{hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "fulfiller.sh/cluster=c1"}}, []string{"node-a"}},
		{hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "fulfiller.sh/cluster in (c1,c2),!karpenter.sh/nodepool"}}, []string{"node-b"}},
		{hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "empty,fulfiller.sh/cluster!=c2"}}, []string{"node-a"}},
		{hcloud.ServerListOpts{Name: "node-b"}, []string{"node-b"}},
		{hcloud.ServerListOpts{Status: []hcloud.ServerStatus{hcloud.ServerStatusRunning}}, []string{"node-a"}},
		{hcloud.ServerListOpts{Sort: []string{"name:desc"}}, []string{"node-b", "node-a"}},
	} {
		list, err := c.Server.AllWithOpts(ctx, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range list {
			names = append(names, s.Name)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("list %+v = %v, want %v", tc.opts, names, tc.want)
		}
	}
	if _, _, err := c.Server.List(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "a in b"}}); !hcloud.IsError(err, hcloud.ErrorCodeInvalidInput) {
		t.Errorf("a broken label selector: %v", err)
	}

	// Labels can change; the user data cannot.
	if _, _, err := c.Server.Update(ctx, srv, hcloud.ServerUpdateOpts{Labels: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if held, _ := s.Server(srv.ID); held.Labels["k"] != "v" || len(held.Labels) != 1 {
		t.Errorf("labels after update: %v", held.Labels)
	}

	// Power off and on: the machine stops and boots again from its disk.
	a, _, err := c.Server.Poweroff(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Action.WaitFor(ctx, a); err != nil {
		t.Fatal(err)
	}
	if srv, _, _ = c.Server.GetByID(ctx, srv.ID); srv.Status != hcloud.ServerStatusOff {
		t.Errorf("status after power-off: %s", srv.Status)
	}
	if a, _, err = c.Server.Poweron(ctx, srv); err != nil {
		t.Fatal(err)
	}
	if err := c.Action.WaitFor(ctx, a); err != nil {
		t.Fatal(err)
	}

	del, _, err := c.Server.DeleteWithResult(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Action.WaitFor(ctx, del.Action); err != nil {
		t.Fatal(err)
	}
	if gone, _, err := c.Server.GetByID(ctx, srv.ID); gone != nil || err != nil {
		t.Errorf("deleted server: %+v, %v", gone, err)
	}
	want := []string{"boot " + id(srv.ID), "poweroff " + id(srv.ID), "boot " + id(srv.ID), "remove " + id(srv.ID)}
	var mine []string
	for _, e := range m.log() {
		if strings.HasSuffix(e, " "+id(srv.ID)) {
			mine = append(mine, e)
		}
	}
	if !slices.Equal(mine, want) {
		t.Errorf("machine events %v, want %v", mine, want)
	}
}

func id(n int64) string { return strconv.FormatInt(n, 10) }

// TestActionsProgress: an action runs for a while with a growing progress, then succeeds.
func TestActionsProgress(t *testing.T) {
	ctx := context.Background()
	s := quick(t, standin.Options{CreateDuration: 1500 * time.Millisecond})
	c := newClient(s, hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(200 * time.Millisecond)}))
	res, _, err := c.Server.Create(ctx, createOpts("slow"))
	if err != nil {
		t.Fatal(err)
	}
	var seen []int
	var last *hcloud.Action
	err = c.Action.WaitForFunc(ctx, func(a *hcloud.Action) error {
		seen = append(seen, a.Progress)
		last = a
		return nil
	}, res.Action)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(seen) || len(seen) < 3 || seen[0] >= 100 || seen[len(seen)-1] != 100 {
		t.Errorf("progress seen %v, want growing from below 100 to 100", seen)
	}
	if last.Status != hcloud.ActionStatusSuccess || last.Finished.IsZero() || last.Finished.Sub(last.Started) < time.Second {
		t.Errorf("finished action %+v", last)
	}
	// While the server's create action ran it was locked; a delete was refused.
	s.SetCreateDuration(2 * time.Second)
	busy, _, err := c.Server.Create(ctx, createOpts("busy"))
	if err != nil {
		t.Fatal(err)
	}
	if srv, _, _ := c.Server.GetByID(ctx, busy.Server.ID); !srv.Locked {
		t.Error("a server with a running action is not locked")
	}
	if _, _, err := c.Server.DeleteWithResult(ctx, busy.Server); !hcloud.IsError(err, hcloud.ErrorCodeLocked) {
		t.Errorf("delete of a locked server: %v", err)
	}
}

// TestErrors: each failure answers with the API's error envelope and code, which hcloud-go
// turns into an hcloud.Error with that code.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	s := quick(t, standin.Options{})
	c := newClient(s)
	created, _, err := c.Server.Create(ctx, createOpts("taken"))
	if err != nil {
		t.Fatal(err)
	}
	pg, _, err := c.PlacementGroup.Create(ctx, hcloud.PlacementGroupCreateOpts{Name: "spread", Type: hcloud.PlacementGroupTypeSpread})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func()
		opts  func() hcloud.ServerCreateOpts
		code  hcloud.ErrorCode
		field string // of an invalid_input's details
	}{
		{name: "unknown location", opts: func() hcloud.ServerCreateOpts {
			o := createOpts("x")
			o.Location = &hcloud.Location{Name: "mars1"}
			return o
		}, code: hcloud.ErrorCodeInvalidInput, field: "location"},
		{name: "type not offered there", opts: func() hcloud.ServerCreateOpts {
			o := createOpts("x")
			o.Location = &hcloud.Location{Name: "ash"}
			return o
		}, code: hcloud.ErrorCodeInvalidInput, field: "server_type"},
		{name: "bad name", opts: func() hcloud.ServerCreateOpts { return createOpts("no_underscores") }, code: hcloud.ErrorCodeInvalidInput, field: "name"},
		{name: "user data over 32KiB", opts: func() hcloud.ServerCreateOpts {
			o := createOpts("x")
			o.UserData = strings.Repeat("a", standin.MaxUserData+1)
			return o
		}, code: hcloud.ErrorCodeInvalidInput, field: "user_data"},
		{name: "reserved label prefix", opts: func() hcloud.ServerCreateOpts {
			o := createOpts("x")
			o.Labels = map[string]string{"hetzner.cloud/x": "y"}
			return o
		}, code: hcloud.ErrorCodeInvalidInput, field: "labels"},
		{name: "name taken", opts: func() hcloud.ServerCreateOpts { return createOpts("taken") }, code: hcloud.ErrorCodeUniquenessError},
		{name: "stockout", setup: func() { s.SetStockout("cx23", "fsn1", true) }, opts: func() hcloud.ServerCreateOpts { return createOpts("x") },
			code: hcloud.ErrorCodeResourceUnavailable},
		{name: "placement", setup: func() { s.SetStockout("cx23", "fsn1", false); s.SetPlacementFailure("cx23", "fsn1", true) },
			opts: func() hcloud.ServerCreateOpts { return createOpts("x") }, code: hcloud.ErrorCodePlacementError},
		{name: "quota", setup: func() { s.SetPlacementFailure("cx23", "fsn1", false); s.SetServerLimit(1) },
			opts: func() hcloud.ServerCreateOpts { return createOpts("x") }, code: hcloud.ErrorCodeResourceLimitExceeded},
		{name: "unknown placement group", setup: func() { s.SetServerLimit(0) }, opts: func() hcloud.ServerCreateOpts {
			o := createOpts("x")
			o.PlacementGroup = &hcloud.PlacementGroup{ID: 1}
			return o
		}, code: hcloud.ErrorCodeInvalidInput, field: "placement_group"},
		{name: "server error", setup: func() {
			s.Fail(standin.Failure{Code: standin.CodeServerError, Method: http.MethodPost, PathPrefix: "/servers"})
		},
			opts: func() hcloud.ServerCreateOpts { return createOpts("x") }, code: hcloud.ErrorCodeServerError},
		// hcloud-go retries a conflict (twice, as configured here), then gives up.
		{name: "conflict retried", setup: func() { s.Fail(standin.Failure{Code: standin.CodeConflict, Times: 3, PathPrefix: "/servers"}) },
			opts: func() hcloud.ServerCreateOpts { return createOpts("x") }, code: hcloud.ErrorCodeConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			_, _, err := c.Server.Create(ctx, tc.opts())
			var apiErr hcloud.Error
			if !errors.As(err, &apiErr) || apiErr.Code != tc.code {
				t.Fatalf("error %v, want code %s", err, tc.code)
			}
			if apiErr.Message == "" || apiErr.Response() == nil || apiErr.Response().Header.Get("X-Correlation-Id") == "" {
				t.Errorf("error without message or correlation id: %v", err)
			}
			if tc.field != "" {
				details, ok := apiErr.Details.(hcloud.ErrorDetailsInvalidInput)
				if !ok || len(details.Fields) != 1 || details.Fields[0].Name != tc.field || len(details.Fields[0].Messages) == 0 {
					t.Errorf("invalid_input details %#v, want field %s", apiErr.Details, tc.field)
				}
			}
		})
	}
	if got := len(s.Servers()); got != 1 {
		t.Errorf("%d servers after failed creates, want 1", got)
	}

	// A gateway error is retried by hcloud-go; one too many gets through.
	s.Fail(standin.Failure{Status: http.StatusBadGateway, Times: 2, PathPrefix: "/servers"})
	if _, _, err := c.Server.GetByID(ctx, created.Server.ID); err != nil {
		t.Errorf("two 502s were not retried away: %v", err)
	}
	s.Fail(standin.Failure{Status: http.StatusBadGateway, Times: 3, PathPrefix: "/servers"})
	if _, _, err := c.Server.GetByID(ctx, created.Server.ID); !errors.Is(err, hcloud.ErrStatusCode) {
		t.Errorf("three 502s: %v", err)
	}

	// A full spread group fails placement.
	for i := 0; i < 10; i++ {
		o := createOpts(fmt.Sprintf("spread-%d", i))
		o.PlacementGroup = pg.PlacementGroup
		if _, _, err := c.Server.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	o := createOpts("spread-10")
	o.PlacementGroup = pg.PlacementGroup
	if _, _, err := c.Server.Create(ctx, o); !hcloud.IsError(err, hcloud.ErrorCodePlacementError) {
		t.Errorf("an 11th server in a spread group: %v", err)
	}

	// Datacenters are gone from the API.
	if _, _, err := c.Datacenter.List(ctx, hcloud.DatacenterListOpts{}); !hcloud.IsError(err, hcloud.ErrorDeprecatedAPIEndpoint) { //nolint:staticcheck // SA1019: the removed endpoint, called on purpose
		t.Errorf("datacenters: %v", err)
	}

	// A wrong token, then a revoked one.
	bad := hcloud.NewClient(hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken("wrong"))
	if _, _, err := bad.Server.List(ctx, hcloud.ServerListOpts{}); !hcloud.IsError(err, hcloud.ErrorCodeUnauthorized) {
		t.Errorf("wrong token: %v", err)
	}
	s.RevokeToken()
	if _, _, err := c.Location.List(ctx, hcloud.LocationListOpts{}); !hcloud.IsError(err, hcloud.ErrorCodeUnauthorized) {
		t.Errorf("revoked token: %v", err)
	}
}

// TestRateLimit: every answer carries the RateLimit headers; an exhausted budget answers
// 429 rate_limit_exceeded until it refills.
func TestRateLimit(t *testing.T) {
	ctx := context.Background()
	s := quick(t, standin.Options{})
	c := newClient(s, hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0}))
	_, r1, err := c.Location.List(ctx, hcloud.LocationListOpts{})
	if err != nil {
		t.Fatal(err)
	}
	_, r2, err := c.Location.List(ctx, hcloud.LocationListOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Meta.Ratelimit.Limit != 3600 || r2.Meta.Ratelimit.Remaining != r1.Meta.Ratelimit.Remaining-1 ||
		r2.Meta.Ratelimit.Reset.Before(time.Now()) {
		t.Errorf("rate limit meta %+v then %+v", r1.Meta.Ratelimit, r2.Meta.Ratelimit)
	}

	s.SetRateLimit(4, 4*time.Second, 0)
	_, resp, err := c.Location.List(ctx, hcloud.LocationListOpts{})
	if !hcloud.IsError(err, hcloud.ErrorCodeRateLimitExceeded) || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("with no budget left: %v", err)
	}
	reset := resp.Meta.Ratelimit.Reset
	if resp.Meta.Ratelimit.Remaining != 0 || resp.Meta.Ratelimit.Limit != 4 || reset.Before(time.Now().Add(2*time.Second)) || reset.After(time.Now().Add(5*time.Second)) {
		t.Errorf("rate limit meta of a 429: %+v", resp.Meta.Ratelimit)
	}
	// Unauthenticated requests count too.
	bad := hcloud.NewClient(hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken("wrong"), hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0}))
	if _, _, err := bad.Location.List(ctx, hcloud.LocationListOpts{}); !hcloud.IsError(err, hcloud.ErrorCodeRateLimitExceeded) {
		t.Errorf("an unauthenticated request with no budget left: %v", err)
	}
	time.Sleep(time.Until(reset))
	if _, _, err := c.Location.List(ctx, hcloud.LocationListOpts{}); err != nil {
		t.Errorf("after the reset: %v", err)
	}
}

// TestPagination: list endpoints page with the meta the API gives and hcloud-go follows it.
func TestPagination(t *testing.T) {
	ctx := context.Background()
	s := quick(t, standin.Options{})
	c := newClient(s)
	for i := 0; i < 57; i++ {
		if _, _, err := c.PlacementGroup.Create(ctx, hcloud.PlacementGroupCreateOpts{Name: fmt.Sprintf("pg-%02d", i), Type: hcloud.PlacementGroupTypeSpread,
			Labels: map[string]string{"even": strconv.FormatBool(i%2 == 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	page, resp, err := c.PlacementGroup.List(ctx, hcloud.PlacementGroupListOpts{ListOpts: hcloud.ListOpts{Page: 2, PerPage: 20}})
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Meta.Pagination
	if len(page) != 20 || page[0].Name != "pg-20" || p.Page != 2 || p.PerPage != 20 || p.PreviousPage != 1 || p.NextPage != 3 || p.LastPage != 3 || p.TotalEntries != 57 {
		t.Errorf("page 2 of 20: %d items from %s, pagination %+v", len(page), page[0].Name, p)
	}
	if !strings.Contains(resp.Header.Get("Link"), `rel="next"`) {
		t.Errorf("Link header %q", resp.Header.Get("Link"))
	}
	_, resp, _ = c.PlacementGroup.List(ctx, hcloud.PlacementGroupListOpts{ListOpts: hcloud.ListOpts{PerPage: 500}})
	if resp.Meta.Pagination.PerPage != 50 {
		t.Errorf("per_page 500 gave %d per page, want the maximum 50", resp.Meta.Pagination.PerPage)
	}
	all, err := c.PlacementGroup.AllWithOpts(ctx, hcloud.PlacementGroupListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "even=true"}})
	if err != nil || len(all) != 29 {
		t.Errorf("all even groups: %d, %v", len(all), err)
	}
	everything, err := c.PlacementGroup.All(ctx)
	if err != nil || len(everything) != 57 {
		t.Errorf("all groups: %d, %v", len(everything), err)
	}
}

// TestCatalog: server types, locations, images and prices as hcloud-go (and the provider)
// look them up.
func TestCatalog(t *testing.T) {
	ctx := context.Background()
	s := quick(t, standin.Options{})
	c := newClient(s)
	st, _, err := c.ServerType.Get(ctx, "cx23")
	if err != nil || st == nil || st.Cores != 2 || st.Memory != 4 || st.Architecture != hcloud.ArchitectureX86 || len(st.Pricings) != 3 {
		t.Fatalf("server type cx23: %+v, %v", st, err)
	}
	if missing, _, err := c.ServerType.Get(ctx, "cx99"); missing != nil || err != nil {
		t.Errorf("unknown server type: %+v, %v", missing, err)
	}
	for _, arch := range []hcloud.Architecture{hcloud.ArchitectureX86, hcloud.ArchitectureARM} {
		img, _, err := c.Image.GetForArchitecture(ctx, "ubuntu-24.04", arch)
		if err != nil || img == nil || img.Architecture != arch || img.Type != hcloud.ImageTypeSystem {
			t.Errorf("image for %s: %+v, %v", arch, img, err)
		}
	}
	l, _, err := c.Location.Get(ctx, "hel1")
	if err != nil || l == nil || l.NetworkZone != hcloud.NetworkZoneEUCentral || l.Country != "FI" {
		t.Errorf("location hel1: %+v, %v", l, err)
	}
	pricing, _, err := c.Pricing.Get(ctx)
	if err != nil || pricing.Currency != "EUR" || len(pricing.ServerTypes) == 0 || pricing.ServerTypes[0].Pricings[0].Hourly.Net == "" {
		t.Errorf("pricing: %+v, %v", pricing, err)
	}
	s.SetStockout("cx23", "nbg1", true)
	st, _, _ = c.ServerType.Get(ctx, "cx23")
	for _, loc := range st.Locations {
		if (loc.Location.Name == "nbg1") == loc.Available {
			t.Errorf("sold-out cx23 in nbg1: location %s available %t", loc.Location.Name, loc.Available)
		}
	}
}

// TestNetworksAndMetadata: a server created without public addresses and powered on after
// its network attachment (as the provider does for private-only servers) boots with its
// private address, and its metadata service answers as Hetzner's does.
func TestNetworksAndMetadata(t *testing.T) {
	ctx := context.Background()
	m := &machines{}
	s := quick(t, standin.Options{Machines: m})
	c := newClient(s)
	nw, _, err := c.Network.Create(ctx, hcloud.NetworkCreateOpts{Name: "cluster", IPRange: mustCIDR("10.0.0.0/16"),
		Subnets: []hcloud.NetworkSubnet{
			{Type: hcloud.NetworkSubnetTypeCloud, IPRange: mustCIDR("10.0.0.0/24"), NetworkZone: hcloud.NetworkZoneEUCentral},
			{Type: hcloud.NetworkSubnetTypeCloud, IPRange: mustCIDR("10.0.1.0/24"), NetworkZone: hcloud.NetworkZoneEUCentral},
		}})
	if err != nil {
		t.Fatal(err)
	}
	fw, _, err := c.Firewall.Create(ctx, hcloud.FirewallCreateOpts{Name: "nodes"})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := c.SSHKey.Create(ctx, hcloud.SSHKeyCreateOpts{Name: "admin", PublicKey: publicKey("admin")})
	if err != nil {
		t.Fatal(err)
	}
	opts := createOpts("private")
	opts.StartAfterCreate = hcloud.Ptr(false)
	opts.PublicNet = &hcloud.ServerCreatePublicNet{EnableIPv4: false, EnableIPv6: false}
	opts.Firewalls = []*hcloud.ServerCreateFirewall{{Firewall: *fw.Firewall}}
	opts.SSHKeys = []*hcloud.SSHKey{key}
	res, _, err := c.Server.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NextActions) != 0 || res.RootPassword != "" {
		t.Errorf("no start after create and ssh keys: next actions %v, root password %q", res.NextActions, res.RootPassword)
	}
	if err := c.Action.WaitFor(ctx, res.Action); err != nil {
		t.Fatal(err)
	}
	a, _, err := c.Server.AttachToNetwork(ctx, res.Server, hcloud.ServerAttachToNetworkOpts{Network: nw})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Action.WaitFor(ctx, a); err != nil {
		t.Fatal(err)
	}
	if len(m.log()) != 0 {
		t.Errorf("a server that was not started has a machine: %v", m.log())
	}
	if a, _, err = c.Server.Poweron(ctx, res.Server); err != nil {
		t.Fatal(err)
	}
	if err := c.Action.WaitFor(ctx, a); err != nil {
		t.Fatal(err)
	}
	srv, _, _ := c.Server.GetByID(ctx, res.Server.ID)
	if !srv.PublicNet.IPv4.IsUnspecified() || len(srv.PrivateNet) != 1 || srv.PrivateNet[0].IP.String() != "10.0.1.1" ||
		len(srv.PublicNet.Firewalls) != 1 || srv.PublicNet.Firewalls[0].Firewall.ID != fw.Firewall.ID {
		t.Errorf("server: public %+v, private %+v, firewalls %+v", srv.PublicNet.IPv4, srv.PrivateNet, srv.PublicNet.Firewalls)
	}
	if mc := m.machine(srv.ID); !slices.Equal(mc.PrivateIPs, []string{"10.0.1.1"}) || mc.PublicIPv4 != "" {
		t.Errorf("machine booted with %+v", mc)
	}

	md := metadata.NewClient(metadata.WithEndpoint(s.MetadataURL(srv.ID) + "/hetzner/v1/metadata"))
	if got, err := md.InstanceIDWithContext(ctx); err != nil || got != srv.ID {
		t.Errorf("instance-id %d, %v", got, err)
	}
	if got, err := md.HostnameWithContext(ctx); err != nil || got != "private" {
		t.Errorf("hostname %q, %v", got, err)
	}
	if got, err := md.AvailabilityZoneWithContext(ctx); err != nil || got != "fsn1-dc14" {
		t.Errorf("availability-zone %q, %v", got, err)
	}
	if got, err := md.PrivateNetworksWithContext(ctx); err != nil || !strings.Contains(got, "ip: 10.0.1.1") || !strings.Contains(got, "subnet: 10.0.1.0/24") {
		t.Errorf("private-networks %q, %v", got, err)
	}
	unknown := metadata.NewClient(metadata.WithEndpoint(s.MetadataURL(1) + "/hetzner/v1/metadata"))
	if _, err := unknown.InstanceIDWithContext(ctx); err == nil {
		t.Error("the metadata of a server that does not exist")
	}

	fwNow, _, _ := c.Firewall.GetByID(ctx, fw.Firewall.ID)
	if len(fwNow.AppliedTo) != 1 || fwNow.AppliedTo[0].Server.ID != srv.ID {
		t.Errorf("firewall applied to %+v", fwNow.AppliedTo)
	}
	if _, err := c.Network.Delete(ctx, nw); !hcloud.IsError(err, "resource_in_use") {
		t.Errorf("deleting a network in use: %v", err)
	}
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// publicKey is an OpenSSH ed25519 public key line (the key itself is made up).
func publicKey(comment string) string {
	var blob []byte
	for _, part := range [][]byte{[]byte("ssh-ed25519"), []byte(strings.Repeat(comment, 32)[:32])} {
		blob = binary.BigEndian.AppendUint32(blob, uint32(len(part)))
		blob = append(blob, part...)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob) + " " + comment + "@example"
}

// TestAfterCreate: the hook sees each created server after the client has its whole answer,
// while the request is still open: the client can act on the answer before the hook returns.
func TestAfterCreate(t *testing.T) {
	ctx := context.Background()
	s := quick(t, standin.Options{})
	answered := make(chan int64, 1)
	hooked := make(chan standin.Server, 1)
	s.AfterCreate(func(srv standin.Server) {
		select {
		case id := <-answered:
			if id != srv.ID {
				t.Errorf("the client was answered server %d, the hook saw %d", id, srv.ID)
			}
		case <-time.After(10 * time.Second):
			t.Error("the client had no answer while the hook ran")
		}
		hooked <- srv
	})
	res, _, err := newClient(s).Server.Create(ctx, createOpts("hooked"))
	if err != nil {
		t.Fatal(err)
	}
	answered <- res.Server.ID
	srv := <-hooked
	if srv.Name != "hooked" || srv.ServerType != "cx23" {
		t.Errorf("the hook saw %+v", srv)
	}
	s.AfterCreate(nil)
	if _, _, err := newClient(s).Server.Create(ctx, createOpts("not-hooked")); err != nil {
		t.Fatal(err)
	}
}

// TestCounts: requests are counted per endpoint (the route's template, a server action by
// its name), token (a hash, never the token), User-Agent and status, refused ones too.
func TestCounts(t *testing.T) {
	ctx := context.Background()
	s := quick(t, standin.Options{})
	c := newClient(s, hcloud.WithApplication("counted", "1.0"))
	res, _, err := c.Server.Create(ctx, createOpts("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := c.Server.GetByID(ctx, res.Server.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Server.Poweroff(ctx, res.Server); err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("o", 64)
	bad := hcloud.NewClient(hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken(other), hcloud.WithApplication("other", "2.0"),
		hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0}))
	if _, _, err := bad.Server.GetByID(ctx, res.Server.ID); !hcloud.IsError(err, hcloud.ErrorCodeUnauthorized) {
		t.Fatalf("with another token: %v", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint()+"/volumes/7", nil)
	req.Header.Set("Authorization", "Bearer "+s.Token())
	req.Header.Set("User-Agent", "plain")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}

	counts := s.Counts()
	byEndpoint := map[string]int{}
	for _, n := range counts {
		if strings.Contains(n.Token, s.Token()) || strings.Contains(n.Token, other) {
			t.Errorf("a count holds a token: %+v", n)
		}
		if n.Key.Token == apitally.TokenID(other) {
			if n.Endpoint != "GET /servers/{id}" || n.Status != http.StatusUnauthorized || !strings.HasPrefix(n.Agent, "other/2.0") || n.Requests != 1 {
				t.Errorf("the other token's request counted as %+v", n)
			}
			continue
		}
		if n.Key.Token != apitally.TokenID(s.Token()) {
			t.Errorf("count %+v: token %q is neither the project's nor the other", n, n.Key.Token)
		}
		byEndpoint[n.Endpoint] += n.Requests
	}
	polls := byEndpoint["GET /actions"] + byEndpoint["GET /actions/{id}"]
	if byEndpoint["POST /servers"] != 1 || byEndpoint["GET /servers/{id}"] != 2 || byEndpoint["POST /servers/{id}/actions/poweroff"] != 1 ||
		byEndpoint["GET ?"] != 1 || polls == 0 {
		t.Errorf("counts per endpoint %v; want 1 create, 2 reads, 1 poweroff, 1 unknown and the polls", byEndpoint)
	}
	if made, counted := len(s.Requests()), apitally.Sum(counts, nil); made != counted {
		t.Errorf("%d requests answered, %d counted", made, counted)
	}
	for _, n := range counts {
		if n.Key.Token == apitally.TokenID(s.Token()) && n.Endpoint != "GET ?" && !strings.HasPrefix(n.Agent, "counted/1.0 hcloud-go/") {
			t.Errorf("count %+v: agent %q; want hcloud-go's with the application", n, n.Agent)
		}
	}
}
