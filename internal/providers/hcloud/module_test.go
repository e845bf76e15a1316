// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

func admin(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(controlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// userData renders what the controller renders for a claim of a Hetzner Cloud node type:
// the server ID is not known yet, so the machine reads it from the metadata service.
func userData(ctx context.Context, t *testing.T, name string) (string, bootstrap.Token) {
	t.Helper()
	// A stock image, as the controller renders for the default bootstrap.install.
	return userDataInstalling(ctx, t, name, bootstrap.Install{Packages: true, KubernetesVersion: "v1.36.3"})
}

// userDataInstalling is userData with the class's install mode.
func userDataInstalling(ctx context.Context, t *testing.T, name string, install bootstrap.Install) (string, bootstrap.Token) {
	t.Helper()
	tok, err := testenv.MintToken(ctx, admin(t), time.Now().Add(15*time.Minute), "hcloud "+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bootstrap.CACertHash(controlPlane.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	data, err := bootstrap.RenderUserData(bootstrap.JoinSpec{
		Install:           install,
		APIServerEndpoint: strings.TrimPrefix(controlPlane.Server, "https://"),
		Token:             tok,
		CACertHash:        hash,
		NodeName:          name,
		ProviderIDFrom:    &bootstrap.ProviderIDSource{URL: v1alpha1.DefaultMetadataURL, Prefix: v1alpha1.DefaultProviderIDPrefix},
		Labels:            map[string]string{"node.kubernetes.io/instance-type": "cx23"},
		Taints:            []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}},
		UserDataLimit:     standin.MaxUserData,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(data), tok
}

func hcloudClient(s *standin.StandIn) *hcloud.Client {
	return hcloud.NewClient(hcloud.WithEndpoint(s.Endpoint()), hcloud.WithToken(s.Token()),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(50 * time.Millisecond)}))
}

// machineTestBudget bounds a test whose server's machine joins. It is longer than the
// machine's own bounds of a join, kubeadm's (token discovery and TLS bootstrap, 5 minutes
// each), so that a machine stuck in a stage of its join (cluster-info never signed for its
// token, a CSR never approved) reports its join failed, which ends waitForNode with the
// machine's log naming the stage, before the test's deadline cuts the wait short without
// a word. A machine that joins takes seconds.
const machineTestBudget = 2*sim.DefaultDiscoveryTimeout + 5*time.Minute

// waitForNode waits until the Node cond accepts is there. A machine of the stand-in that
// reports its join failed ends the wait at once; any failure shows the machines' logs
// (startStandIn), so that a Node that never registers says where its machine stopped.
func waitForNode(ctx context.Context, t *testing.T, machines *standin.SimMachines, name string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if failed := failedMachine(machines.Dir); failed != "" {
			return false, fmt.Errorf("machine of server %s: its join failed", failed)
		}
		n, err := admin(t).CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil && ctx.Err() == nil:
			return false, nil // an API server slow to answer: asked again
		case err != nil:
			return false, err
		}
		node = n
		return cond(n), nil
	})
	if err != nil {
		t.Fatalf("waiting for Node %s: %v (last seen %v)", name, err, node != nil)
	}
	return node
}

func output(t *testing.T, res tfrunner.Result, name string, into any) {
	t.Helper()
	raw, ok := res.Outputs[name]
	if !ok {
		t.Fatalf("no output %s in %v", name, res.Outputs)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("output %s = %s: %v", name, raw, err)
	}
}

// TestModule applies modules/hetzner-cloud with the real hcloud provider against the
// stand-in, through the runner's code: the server has what the module was given, its machine
// boots from exactly that user data, reads its ID from the metadata service and registers as
// hcloud://<id>; destroy deletes the server and powers off its machine.
func TestModule(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), machineTestBudget)
	defer cancel()
	s, machines := startStandIn(t, standin.Options{})
	c := hcloudClient(s)
	key, _, err := c.SSHKey.Create(ctx, hcloud.SSHKeyCreateOpts{Name: "ops", PublicKey: publicKey("ops")})
	if err != nil {
		t.Fatal(err)
	}
	fw, _, err := c.Firewall.Create(ctx, hcloud.FirewallCreateOpts{Name: "nodes"})
	if err != nil {
		t.Fatal(err)
	}
	pg, _, err := c.PlacementGroup.Create(ctx, hcloud.PlacementGroupCreateOpts{Name: "spread", Type: hcloud.PlacementGroupTypeSpread})
	if err != nil {
		t.Fatal(err)
	}
	_, ipRange, _ := net.ParseCIDR("10.0.0.0/16")
	_, subnet, _ := net.ParseCIDR("10.0.1.0/24")
	nw, _, err := c.Network.Create(ctx, hcloud.NetworkCreateOpts{Name: "cluster", IPRange: ipRange,
		Subnets: []hcloud.NetworkSubnet{{Type: hcloud.NetworkSubnetTypeCloud, IPRange: subnet, NetworkZone: hcloud.NetworkZoneEUCentral}}})
	if err != nil {
		t.Fatal(err)
	}

	const name = "hcloud-module"
	data, tok := userData(ctx, t, name)
	req := moduleRequest(t, s, name, "nbg1", "cx23", map[string]string{
		"image": "debian-12", "ssh_keys": "ops", "firewall_ids": fmt.Sprint(fw.Firewall.ID),
		"placement_group_id": fmt.Sprint(pg.PlacementGroup.ID), "network_id": fmt.Sprint(nw.ID),
		"some_other_setting": "ignored",
	}, data)
	log := &testenv.SyncBuffer{}
	res := tfrunner.Run(ctx, req, log, rules)
	if !res.Succeeded {
		t.Fatalf("apply failed: %v\n%s", res.Error, log.String())
	}
	t.Logf("API calls of the apply:\n%s", calls(s.Requests()))
	// The module's poll settings (5s doubling) find each of the apply's actions — the
	// create, the start after it and the network attach, 1 s and 0.5 s long here — done at
	// the first poll; the provider's default (500ms doubling) polled the create twice.
	polls := 0
	for _, r := range s.Requests() {
		if r.Endpoint == "GET /actions" || r.Endpoint == "GET /actions/{id}" {
			polls++
		}
	}
	if polls != 3 {
		t.Errorf("the apply polled actions %d times, want 3: one poll for each of its actions", polls)
	}

	servers := s.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers after apply, want 1", len(servers))
	}
	srv := servers[0]
	if srv.Name != name || srv.ServerType != "cx23" || srv.Location != "nbg1" || srv.Image != "debian-12" || srv.Status != "running" {
		t.Errorf("server %+v", srv)
	}
	if string(srv.UserData) != data {
		t.Error("the server's user data is not byte for byte what the module was given")
	}
	wantLabels := map[string]string{"fulfiller.sh/cluster": "test-cluster", "fulfiller.sh/node": name,
		"fulfiller.sh/node-type": "cx23", "karpenter.sh/nodepool": "general-purpose"}
	if fmt.Sprint(srv.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels %v, want %v", srv.Labels, wantLabels)
	}
	if !slices.Equal(srv.SSHKeys, []int64{key.ID}) || !slices.Equal(srv.Firewalls, []int64{fw.Firewall.ID}) ||
		srv.PlacementGroup != pg.PlacementGroup.ID || len(srv.PrivateNets) != 1 || srv.PrivateNets[0].Network != nw.ID ||
		srv.PublicIPv4 == "" || srv.PublicIPv6 == "" {
		t.Errorf("server %+v", srv)
	}
	var providerID, nodeName string
	var addresses []string
	output(t, res, "provider_id", &providerID)
	output(t, res, "node_name", &nodeName)
	output(t, res, "addresses", &addresses)
	if want := fmt.Sprintf("hcloud://%d", srv.ID); providerID != want || res.ProviderID != want || nodeName != name {
		t.Errorf("outputs provider_id %q (result %q), node_name %q; want %s", providerID, res.ProviderID, nodeName, want)
	}
	if !slices.Equal(addresses, []string{srv.PublicIPv4, srv.PublicIPv6, srv.PrivateNets[0].IP}) {
		t.Errorf("addresses %v, server %+v", addresses, srv)
	}
	for what, text := range map[string]string{"run log": log.String(), "stand-in log": ""} {
		if strings.Contains(text, tok.Secret) {
			t.Errorf("the %s shows the token secret", what)
		}
	}

	// The machine joins from exactly that user data, with the ID it read from the metadata.
	node := waitForNode(ctx, t, machines, name, func(n *corev1.Node) bool { return n.Spec.ProviderID != "" })
	if node.Spec.ProviderID != providerID {
		t.Errorf("the Node registered as %q, the module reported %q", node.Spec.ProviderID, providerID)
	}
	if !slices.Contains(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: srv.PublicIPv4}) {
		t.Errorf("node addresses %v", node.Status.Addresses)
	}

	// Applying again changes nothing.
	before := len(s.Requests())
	req.Name = name + "-apply-2"
	req.WorkDir = t.TempDir()
	if res := tfrunner.Run(ctx, req, log, rules); !res.Succeeded || res.ProviderID != providerID {
		t.Fatalf("second apply: %+v", res.Error)
	}
	for _, r := range s.Requests()[before:] {
		if r.Method != "GET" {
			t.Errorf("a second apply of the same claim made a change: %s", r)
		}
	}

	before = len(s.Requests())
	req.Name, req.Operation, req.WorkDir = name+"-destroy-1", tfrunner.Destroy, t.TempDir()
	if res := tfrunner.Run(ctx, req, log, rules); !res.Succeeded {
		t.Fatalf("destroy failed: %v\n%s", res.Error, log.String())
	}
	t.Logf("API calls of the destroy:\n%s", calls(s.Requests()[before:]))
	if left := s.Servers(); len(left) != 0 {
		t.Errorf("servers left after destroy: %+v", left)
	}
	// The machine was removed with the server: no process, no disk.
	stateDir := filepath.Join(machines.Dir, fmt.Sprint(srv.ID))
	if pid, running := sim.Running(stateDir); running {
		t.Errorf("the machine of the deleted server still runs (pid %d)", pid)
	}
	if _, err := os.Stat(stateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the machine's disk is still there: %v", err)
	}
}

func calls(reqs []standin.Request) string {
	var b strings.Builder
	for _, r := range reqs {
		b.WriteString("  " + r.String() + "\n")
	}
	return b.String()
}

// TestModulePrivateNetworks: a server without public addresses is created stopped, attached
// to its network and only then started, so its machine boots on the private network; a
// subnet_id attaches a server to that subnet of a network with several.
func TestModulePrivateNetworks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), machineTestBudget)
	defer cancel()
	s, machines := startStandIn(t, standin.Options{})
	c := hcloudClient(s)
	cidr := func(v string) *net.IPNet { _, n, _ := net.ParseCIDR(v); return n }
	nw, _, err := c.Network.Create(ctx, hcloud.NetworkCreateOpts{Name: "cluster", IPRange: cidr("10.0.0.0/16"), Subnets: []hcloud.NetworkSubnet{
		{Type: hcloud.NetworkSubnetTypeCloud, IPRange: cidr("10.0.1.0/24"), NetworkZone: hcloud.NetworkZoneEUCentral},
		{Type: hcloud.NetworkSubnetTypeCloud, IPRange: cidr("10.0.2.0/24"), NetworkZone: hcloud.NetworkZoneEUCentral},
	}})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("private only", func(t *testing.T) {
		const name = "hcloud-private"
		data, _ := userData(ctx, t, name)
		req := moduleRequest(t, s, name, "fsn1", "cx23", map[string]string{
			"enable_ipv4": "false", "enable_ipv6": "false", "network_id": fmt.Sprint(nw.ID)}, data)
		before := len(s.Requests())
		log := &testenv.SyncBuffer{}
		res := tfrunner.Run(ctx, req, log, rules)
		if !res.Succeeded {
			t.Fatalf("apply failed: %v\n%s", res.Error, log.String())
		}
		t.Logf("API calls of the apply:\n%s", calls(s.Requests()[before:]))
		var id int64
		if _, err := fmt.Sscanf(res.ProviderID, "hcloud://%d", &id); err != nil {
			t.Fatalf("provider ID %q: %v", res.ProviderID, err)
		}
		srv, ok := s.Server(id)
		if !ok || srv.PublicIPv4 != "" || srv.PublicIPv6 != "" || len(srv.PrivateNets) != 1 || !strings.HasPrefix(srv.PrivateNets[0].IP, "10.0.2.") {
			t.Fatalf("server %+v (the network's last subnet is 10.0.2.0/24)", srv)
		}
		if !slices.Equal(res.Addresses, []string{srv.PrivateNets[0].IP}) {
			t.Errorf("addresses %v", res.Addresses)
		}
		var order []string
		for _, r := range s.Requests()[before:] {
			if r.Method == "POST" {
				order = append(order, r.Path)
			}
		}
		want := []string{"/servers", fmt.Sprintf("/servers/%d/actions/attach_to_network", id), fmt.Sprintf("/servers/%d/actions/poweron", id)}
		if !slices.Equal(order, want) {
			t.Errorf("changes %v, want %v: attached before it starts", order, want)
		}
		node := waitForNode(ctx, t, machines, name, func(n *corev1.Node) bool { return n.Spec.ProviderID != "" })
		if node.Spec.ProviderID != res.ProviderID ||
			!slices.Contains(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: srv.PrivateNets[0].IP}) {
			t.Errorf("Node %s, addresses %v", node.Spec.ProviderID, node.Status.Addresses)
		}
		req.Operation, req.Name, req.WorkDir = tfrunner.Destroy, name+"-destroy-1", t.TempDir()
		if res := tfrunner.Run(ctx, req, log, rules); !res.Succeeded {
			t.Fatalf("destroy failed: %v", res.Error)
		}
	})

	t.Run("subnet", func(t *testing.T) {
		const name = "hcloud-subnet"
		data, _ := userData(ctx, t, name)
		req := moduleRequest(t, s, name, "fsn1", "cx23", map[string]string{"subnet_id": fmt.Sprintf("%d-10.0.1.0/24", nw.ID)}, data)
		// A NodePool name longer than a Hetzner label value is cut to one.
		longPool := strings.Repeat("a", 62) + "--pool"
		labels := req.Variables[tfrunner.VarLabels].(map[string]string)
		labels["karpenter.sh/nodepool"] = longPool
		// The fulfiller's labels: the cluster (over parameters.cluster), the claim, the class.
		labels["fulfiller.sh/cluster"], labels["karpenter.sh/nodeclaim"], labels["fulfiller.sh/nodeclass"] = "prod-eu", name, "hcloud"
		before := len(s.Requests())
		log := &testenv.SyncBuffer{}
		res := tfrunner.Run(ctx, req, log, rules)
		if !res.Succeeded {
			t.Fatalf("apply failed: %v\n%s", res.Error, log.String())
		}
		t.Logf("API calls of the apply:\n%s", calls(s.Requests()[before:]))
		var id int64
		if _, err := fmt.Sscanf(res.ProviderID, "hcloud://%d", &id); err != nil {
			t.Fatalf("provider ID %q: %v", res.ProviderID, err)
		}
		srv, _ := s.Server(id)
		if len(srv.PrivateNets) != 1 || !strings.HasPrefix(srv.PrivateNets[0].IP, "10.0.1.") || srv.PublicIPv4 == "" {
			t.Fatalf("server %+v", srv)
		}
		if got := srv.Labels["karpenter.sh/nodepool"]; got != longPool[:62] {
			t.Errorf("nodepool label %q, want %q", got, longPool[:62])
		}
		if srv.Labels["fulfiller.sh/cluster"] != "prod-eu" || srv.Labels["karpenter.sh/nodeclaim"] != name || srv.Labels["fulfiller.sh/nodeclass"] != "hcloud" {
			t.Errorf("labels %v, want the cluster, claim and class the fulfiller passed", srv.Labels)
		}
		if !slices.Equal(res.Addresses, []string{srv.PublicIPv4, srv.PublicIPv6, srv.PrivateNets[0].IP}) {
			t.Errorf("addresses %v", res.Addresses)
		}
		before = len(s.Requests())
		req.Operation, req.Name, req.WorkDir = tfrunner.Destroy, name+"-destroy-1", t.TempDir()
		if res := tfrunner.Run(ctx, req, log, rules); !res.Succeeded {
			t.Fatalf("destroy failed: %v", res.Error)
		}
		t.Logf("API calls of the destroy:\n%s", calls(s.Requests()[before:]))
		if _, ok := s.Server(id); ok {
			t.Error("the server survived its destroy")
		}
	})
}

// TestModuleImageSelector: with image_selector the module creates the server from the newest
// image whose labels match, of the server type's architecture (a snapshot images/hetzner-cloud
// made, as the API lists snapshots: no name, labels), and its machine joins from it without
// installing anything; a selector that matches nothing fails the plan before any server is
// ordered.
func TestModuleImageSelector(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), machineTestBudget)
	defer cancel()
	catalog := standin.DefaultCatalog()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	snapshot := func(id int64, arch, version string, created time.Time) standin.Image {
		return standin.Image{ID: id, Type: standin.ImageSnapshot, Description: "fulfiller node " + version, OSFlavor: "ubuntu", OSVersion: "24.04",
			Architecture: arch, DiskSizeGB: 40, Created: created,
			Labels: map[string]string{"fulfiller.sh/image": "node", "fulfiller.sh/kubernetes-version": version}}
	}
	catalog.Images = append(catalog.Images,
		snapshot(9001, "x86", "v1.36.3", base),
		snapshot(9002, "x86", "v1.36.3", base.Add(24*time.Hour)), // the newest of this version and architecture
		snapshot(9003, "arm", "v1.36.3", base.Add(48*time.Hour)),
		snapshot(9004, "x86", "v1.35.7", base.Add(72*time.Hour)))
	s, machines := startStandIn(t, standin.Options{Catalog: catalog})

	const name = "hcloud-snapshot"
	data, _ := userDataInstalling(ctx, t, name, bootstrap.Install{})
	req := moduleRequest(t, s, name, "nbg1", "cx23", map[string]string{
		"image_selector": "fulfiller.sh/image=node,fulfiller.sh/kubernetes-version=v1.36.3"}, data)
	log := &testenv.SyncBuffer{}
	if res := tfrunner.Run(ctx, req, log, rules); !res.Succeeded {
		t.Fatalf("apply failed: %v\n%s", res.Error, log.String())
	}
	servers := s.Servers()
	if len(servers) != 1 || servers[0].ImageID != 9002 {
		t.Fatalf("servers %+v, want one from snapshot 9002", servers)
	}
	// The user data installs nothing: only a machine of an image with the node software joins.
	waitForNode(ctx, t, machines, name, func(n *corev1.Node) bool { return n.Spec.ProviderID != "" })
	req.Name, req.Operation, req.WorkDir = name+"-destroy", tfrunner.Destroy, t.TempDir()
	if res := tfrunner.Run(ctx, req, log, rules); !res.Succeeded {
		t.Fatalf("destroy failed: %v\n%s", res.Error, log.String())
	}

	before := len(s.Requests())
	req = moduleRequest(t, s, name+"-none", "nbg1", "cx23", map[string]string{"image_selector": "fulfiller.sh/kubernetes-version=v1.99.0"}, data)
	res := tfrunner.Run(ctx, req, log, rules)
	if res.Succeeded || !strings.Contains(res.Error.Message, "no image found") {
		t.Errorf("a selector matching nothing: %+v, want the provider's no image found", res.Error)
	}
	for _, r := range s.Requests()[before:] {
		if r.Method == "POST" {
			t.Errorf("a selector matching nothing still ordered something: %s", r)
		}
	}
}

// TestModuleInputs: inputs the module refuses fail the plan with the module's own message,
// before any server is ordered.
func TestModuleInputs(t *testing.T) {
	t.Parallel()
	s, _ := startStandIn(t, standin.Options{})
	for _, tc := range []struct {
		name   string
		params map[string]string
		want   string
	}{
		{"no cluster", map[string]string{"cluster": ""}, "the cluster's name is required"},
		{"cluster label value", map[string]string{"cluster": "prod/eu"}, "parameters.cluster, when set, is the cluster's name"},
		{"firewall ids", map[string]string{"firewall_ids": "web"}, "parameters.firewall_ids must be"},
		{"network and subnet", map[string]string{"network_id": "1", "subnet_id": "1-10.0.1.0/24"}, "exclude each other"},
		{"no address at all", map[string]string{"enable_ipv4": "false", "enable_ipv6": "false"}, "needs parameters.network_id"},
		{"switch", map[string]string{"enable_ipv6": "no"}, "must be \"true\" or \"false\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			req := moduleRequest(t, s, "hcloud-inputs", "fsn1", "cx23", tc.params, "#cloud-config\n")
			res := tfrunner.Run(ctx, req, &testenv.SyncBuffer{}, rules)
			if res.Succeeded || res.Error.Class != tfrunner.InvalidModule || !strings.Contains(res.Error.Message, tc.want) {
				t.Errorf("result %+v, want InvalidModule with %q", res.Error, tc.want)
			}
		})
	}
	t.Cleanup(func() {
		for _, r := range s.Requests() {
			if r.Method == "POST" {
				t.Errorf("a refused input still ordered something: %s", r)
			}
		}
	})
}
