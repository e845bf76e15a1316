// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"time"
)

type network struct {
	id      int64
	name    string
	ipRange netip.Prefix
	subnets []subnet
	labels  map[string]string
	created time.Time
	servers []int64
	// used are the addresses given out, per subnet.
	used map[netip.Addr]bool
}

type subnet struct {
	ipRange     netip.Prefix
	networkZone string
	gateway     netip.Addr
}

// subnetFor is the subnet a server in the network zone is attached to when it asks for no
// particular one: the last cloud subnet of the zone, ordered by IP range.
func (n *network) subnetFor(zone string) *subnet {
	var found *subnet
	for i := range n.subnets {
		if sn := &n.subnets[i]; sn.networkZone == zone {
			if found == nil || sn.ipRange.Addr().Compare(found.ipRange.Addr()) > 0 {
				found = sn
			}
		}
	}
	return found
}

// freeIP is the lowest address of the subnet that no one has, other than its first and
// last address and the network's gateway.
func (n *network) freeIP(sn *subnet) (netip.Addr, bool) {
	for a := sn.ipRange.Addr().Next(); sn.ipRange.Contains(a.Next()); a = a.Next() {
		if a != sn.gateway && !n.used[a] {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func (s *StandIn) networkJSON(n *network) jsonNetwork {
	j := jsonNetwork{ID: n.id, Name: n.name, IPRange: n.ipRange.String(), Subnets: []jsonSubnet{}, Routes: []any{},
		Servers: append([]int64{}, n.servers...), LoadBalancers: []int64{}, Labels: maps.Clone(n.labels), Created: apiTime(n.created)}
	for _, sn := range n.subnets {
		j.Subnets = append(j.Subnets, jsonSubnet{Type: "cloud", IPRange: sn.ipRange.String(), NetworkZone: sn.networkZone, Gateway: sn.gateway.String()})
	}
	return j
}

// attach gives srv an address in the network (ip if set, else one of the subnet with
// ipRange, else of the zone's subnet). Callers hold s.mu.
func (s *StandIn) attach(srv *server, n *network, ip string, ipRange *netip.Prefix) *apiError {
	for _, pn := range srv.privateNets {
		if pn.network == n.id {
			return newError(CodeServerAlreadyAttached, "server %d is already attached to network %d", srv.id, n.id)
		}
	}
	var sn *subnet
	switch {
	case ip != "":
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return invalidInput("ip", "is not an IP address")
		}
		for i := range n.subnets {
			if n.subnets[i].ipRange.Contains(addr) {
				sn = &n.subnets[i]
			}
		}
		if sn == nil || n.used[addr] || addr == sn.gateway {
			return newError("ip_not_available", "IP %s is not available in network %d", ip, n.id)
		}
		n.used[addr] = true
		srv.privateNets = append(srv.privateNets, privateNet{network: n.id, ip: addr.String(), aliasIPs: []string{}, mac: mac(srv.id, n.id)})
		n.servers = append(n.servers, srv.id)
		return nil
	case ipRange != nil:
		for i := range n.subnets {
			if n.subnets[i].ipRange == *ipRange {
				sn = &n.subnets[i]
			}
		}
		if sn == nil {
			return invalidInput("ip_range", fmt.Sprintf("network %d has no subnet %s", n.id, ipRange))
		}
	default:
		sn = n.subnetFor(srv.location.NetworkZone)
	}
	if sn == nil || sn.networkZone != srv.location.NetworkZone {
		return newError(CodeNoSubnetAvailable, "network %d has no subnet in network zone %s", n.id, srv.location.NetworkZone)
	}
	addr, ok := n.freeIP(sn)
	if !ok {
		return newError(CodeNoSubnetAvailable, "subnet %s of network %d is full", sn.ipRange, n.id)
	}
	n.used[addr] = true
	srv.privateNets = append(srv.privateNets, privateNet{network: n.id, ip: addr.String(), aliasIPs: []string{}, mac: mac(srv.id, n.id)})
	n.servers = append(n.servers, srv.id)
	return nil
}

// releaseAddresses gives back the private addresses attach gave srv. Callers hold s.mu.
func (s *StandIn) releaseAddresses(srv *server) {
	for _, pn := range srv.privateNets {
		n := s.networks[pn.network]
		if addr, err := netip.ParseAddr(pn.ip); err == nil {
			delete(n.used, addr)
		}
		n.servers = slices.DeleteFunc(n.servers, func(x int64) bool { return x == srv.id })
	}
	srv.privateNets = nil
}

func mac(server, network int64) string {
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], uint32(server))
	binary.BigEndian.PutUint16(b[4:6], uint16(network))
	return fmt.Sprintf("86:00:%02x:%02x:%02x:%02x", b[2], b[3], b[4]^b[1], b[5])
}

// attach_to_network: {network, ip, alias_ips, ip_range}. Callers hold s.mu.
func (s *StandIn) attachAction(srv *server, body map[string]json.RawMessage) (*action, *apiError) {
	id, ok := parseInt64(body["network"])
	if !ok {
		return nil, invalidInput("network", "is required")
	}
	n, ok := s.networks[id]
	if !ok {
		return nil, invalidInput("network", fmt.Sprintf("network %d not found", id))
	}
	var ip string
	if raw, ok := body["ip"]; ok {
		_ = json.Unmarshal(raw, &ip)
	}
	var ipRange *netip.Prefix
	if raw, ok := body["ip_range"]; ok {
		var v string
		_ = json.Unmarshal(raw, &v)
		if v != "" {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, invalidInput("ip_range", "is not a CIDR block")
			}
			ipRange = &p
		}
	}
	if e := s.attach(srv, n, ip, ipRange); e != nil {
		return nil, e
	}
	a := s.newAction("attach_to_network", s.faults.actionDuration, jsonResourceRef{ID: srv.id, Type: "server"}, jsonResourceRef{ID: n.id, Type: "network"})
	s.after(s.faults.actionDuration, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		a.finish(nil)
	})
	return a, nil
}

// detach_from_network: {network}. Callers hold s.mu.
func (s *StandIn) detachAction(srv *server, body map[string]json.RawMessage) (*action, *apiError) {
	id, ok := parseInt64(body["network"])
	if !ok {
		return nil, invalidInput("network", "is required")
	}
	n, ok := s.networks[id]
	if !ok {
		return nil, invalidInput("network", fmt.Sprintf("network %d not found", id))
	}
	i := slices.IndexFunc(srv.privateNets, func(pn privateNet) bool { return pn.network == id })
	if i < 0 {
		return nil, newError("server_not_attached_to_network", "server %d is not attached to network %d", srv.id, id)
	}
	if addr, err := netip.ParseAddr(srv.privateNets[i].ip); err == nil {
		delete(n.used, addr)
	}
	srv.privateNets = slices.Delete(srv.privateNets, i, i+1)
	n.servers = slices.DeleteFunc(n.servers, func(x int64) bool { return x == srv.id })
	a := s.newAction("detach_from_network", s.faults.actionDuration, jsonResourceRef{ID: srv.id, Type: "server"}, jsonResourceRef{ID: n.id, Type: "network"})
	s.after(s.faults.actionDuration, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		a.finish(nil)
	})
	return a, nil
}

// POST /networks: {name, ip_range, subnets [{type, ip_range, network_zone}], labels}.
func (s *StandIn) createNetwork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name    string            `json:"name"`
		IPRange string            `json:"ip_range"`
		Labels  map[string]string `json:"labels"`
		Subnets []struct {
			Type        string `json:"type"`
			IPRange     string `json:"ip_range"`
			NetworkZone string `json:"network_zone"`
		} `json:"subnets"`
	}
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Name == "" {
		writeError(w, invalidInput("name", "is required"))
		return
	}
	ipRange, err := netip.ParsePrefix(req.IPRange)
	if err != nil || !ipRange.Addr().Is4() || !ipRange.Addr().IsPrivate() {
		writeError(w, invalidInput("ip_range", "must be a private IPv4 CIDR block"))
		return
	}
	if err := validateLabels(req.Labels); err != nil {
		writeError(w, invalidInput("labels", err.Error()))
		return
	}
	n := &network{name: req.Name, ipRange: ipRange.Masked(), labels: maps.Clone(req.Labels), created: time.Now(), used: map[netip.Addr]bool{}}
	if n.labels == nil {
		n.labels = map[string]string{}
	}
	for _, sn := range req.Subnets {
		p, err := netip.ParsePrefix(sn.IPRange)
		if err != nil || !ipRange.Contains(p.Addr()) || p.Bits() < ipRange.Bits() {
			writeError(w, invalidInput("subnets", fmt.Sprintf("subnet %s is not inside %s", sn.IPRange, req.IPRange)))
			return
		}
		if sn.Type != "cloud" && sn.Type != "server" {
			writeError(w, invalidInput("subnets", fmt.Sprintf("subnet type %q is not supported by the stand-in", sn.Type)))
			return
		}
		n.subnets = append(n.subnets, subnet{ipRange: p.Masked(), networkZone: sn.NetworkZone, gateway: ipRange.Masked().Addr().Next()})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, other := range s.networks {
		if other.name == n.name {
			writeError(w, newError(CodeUniquenessError, "network name is already used"))
			return
		}
	}
	n.id = s.nextID("network")
	s.networks[n.id] = n
	writeJSON(w, http.StatusCreated, map[string]any{"network": s.networkJSON(n)})
}

// GET /networks: name, label_selector, sort, page, per_page.
func (s *StandIn) listNetworks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, e := labelFilter(q)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	var list []jsonNetwork
	for _, n := range s.networks {
		if (q.Get("name") == "" || n.name == q.Get("name")) && (sel == nil || sel.matches(n.labels)) {
			list = append(list, s.networkJSON(n))
		}
	}
	s.mu.Unlock()
	writeList(w, r, "networks", list, func(j jsonNetwork) int64 { return j.ID }, func(j jsonNetwork) string { return j.Name })
}

// GET /networks/{id}
func (s *StandIn) getNetwork(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	n, ok := s.networks[id]
	var j jsonNetwork
	if ok {
		j = s.networkJSON(n)
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, notFound("network", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"network": j})
}

// DELETE /networks/{id}: only once no server is attached.
func (s *StandIn) deleteNetwork(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.networks[id]
	switch {
	case !ok:
		writeError(w, notFound("network", id))
	case len(n.servers) > 0:
		writeError(w, newError(CodeResourceInUse, "network %d still has servers attached", id))
	default:
		delete(s.networks, id)
		w.WriteHeader(http.StatusNoContent)
	}
}

// writeList sorts (by id, name), paginates and writes a list answer.
func writeList[T any](w http.ResponseWriter, r *http.Request, key string, list []T, id func(T) int64, name func(T) string) {
	if e := sortItems(r, list, id, map[string]func(a, b T) int{
		"name": func(a, b T) int { return compare(name(a), name(b)) },
	}); e != nil {
		writeError(w, e)
		return
	}
	page, meta, e := paginate(w, r, list)
	if e != nil {
		writeError(w, e)
		return
	}
	if page == nil {
		page = []T{}
	}
	writeJSON(w, http.StatusOK, map[string]any{key: page, "meta": meta})
}
