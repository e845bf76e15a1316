// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"k8s.io/utils/ptr"
)

func (s *StandIn) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/actions", s.listActions)
	m.HandleFunc("GET /v1/actions/{id}", s.getAction)

	m.HandleFunc("GET /v1/servers", s.listServers)
	m.HandleFunc("POST /v1/servers", s.createServer)
	m.HandleFunc("GET /v1/servers/{id}", s.getServer)
	m.HandleFunc("PUT /v1/servers/{id}", s.updateServer)
	m.HandleFunc("DELETE /v1/servers/{id}", s.deleteServer)
	m.HandleFunc("POST /v1/servers/{id}/actions/{action}", s.serverAction)

	m.HandleFunc("GET /v1/server_types", s.listServerTypes)
	m.HandleFunc("GET /v1/server_types/{id}", s.getServerType)
	m.HandleFunc("GET /v1/locations", s.listLocations)
	m.HandleFunc("GET /v1/locations/{id}", s.getLocation)
	m.HandleFunc("GET /v1/datacenters", s.datacentersGone)
	m.HandleFunc("GET /v1/datacenters/{id}", s.datacentersGone)
	m.HandleFunc("GET /v1/images", s.listImages)
	m.HandleFunc("GET /v1/images/{id}", s.getImage)
	m.HandleFunc("GET /v1/pricing", s.getPricing)

	m.HandleFunc("GET /v1/networks", s.listNetworks)
	m.HandleFunc("POST /v1/networks", s.createNetwork)
	m.HandleFunc("GET /v1/networks/{id}", s.getNetwork)
	m.HandleFunc("DELETE /v1/networks/{id}", s.deleteNetwork)
	m.HandleFunc("GET /v1/firewalls", s.listFirewalls)
	m.HandleFunc("POST /v1/firewalls", s.createFirewall)
	m.HandleFunc("GET /v1/firewalls/{id}", s.getFirewall)
	m.HandleFunc("DELETE /v1/firewalls/{id}", s.deleteFirewall)
	m.HandleFunc("GET /v1/placement_groups", s.listPlacementGroups)
	m.HandleFunc("POST /v1/placement_groups", s.createPlacementGroup)
	m.HandleFunc("GET /v1/placement_groups/{id}", s.getPlacementGroup)
	m.HandleFunc("DELETE /v1/placement_groups/{id}", s.deletePlacementGroup)
	m.HandleFunc("GET /v1/ssh_keys", s.listSSHKeys)
	m.HandleFunc("POST /v1/ssh_keys", s.createSSHKey)
	m.HandleFunc("GET /v1/ssh_keys/{id}", s.getSSHKey)
	m.HandleFunc("DELETE /v1/ssh_keys/{id}", s.deleteSSHKey)

	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, newError(CodeNotFound, "%s %s is not an endpoint of the stand-in", r.Method, r.URL.Path))
	})
	s.mux = m
}

// GET /server_types: name, sort, page, per_page.
func (s *StandIn) listServerTypes(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	s.mu.Lock()
	var list []jsonServerType
	for i := range s.opts.Catalog.ServerTypes {
		if t := &s.opts.Catalog.ServerTypes[i]; name == "" || t.Name == name {
			list = append(list, s.serverTypeJSON(t))
		}
	}
	s.mu.Unlock()
	writeList(w, r, "server_types", list, func(j jsonServerType) int64 { return j.ID }, func(j jsonServerType) string { return j.Name })
}

func (s *StandIn) getServerType(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	t := s.opts.Catalog.serverType(strconv.FormatInt(id, 10))
	if t == nil {
		writeError(w, notFound("server type", id))
		return
	}
	s.mu.Lock()
	j := s.serverTypeJSON(t)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"server_type": j})
}

// GET /locations: name, sort, page, per_page.
func (s *StandIn) listLocations(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	var list []jsonLocation
	for i := range s.opts.Catalog.Locations {
		if l := &s.opts.Catalog.Locations[i]; name == "" || l.Name == name {
			list = append(list, locationJSON(l))
		}
	}
	writeList(w, r, "locations", list, func(j jsonLocation) int64 { return j.ID }, func(j jsonLocation) string { return j.Name })
}

func (s *StandIn) getLocation(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	l := s.opts.Catalog.location(strconv.FormatInt(id, 10))
	if l == nil {
		writeError(w, notFound("location", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"location": locationJSON(l)})
}

// datacentersGone: GET /datacenters was removed after 1 October 2026 and answers 410 Gone
// (docs.hetzner.cloud changelog, 2026-06-02 "datacenters deprecated").
func (s *StandIn) datacentersGone(w http.ResponseWriter, r *http.Request) {
	e := newError(CodeDeprecatedAPIEndpoint, "API functionality was removed")
	e.details = map[string]any{"announcement": "https://docs.hetzner.cloud/changelog#2026-06-02-datacenters-deprecated"}
	writeError(w, e)
}

// GET /images: name, architecture, type, status, include_deprecated, label_selector, sort,
// page, per_page.
func (s *StandIn) listImages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, e := labelFilter(q)
	if e != nil {
		writeError(w, e)
		return
	}
	var list []jsonImage
	for i := range s.opts.Catalog.Images {
		img := &s.opts.Catalog.Images[i]
		switch {
		case q.Get("name") != "" && img.Name != q.Get("name"),
			len(q["architecture"]) > 0 && !contains(q["architecture"], img.Architecture),
			len(q["type"]) > 0 && !contains(q["type"], img.imageType()),
			len(q["status"]) > 0 && !contains(q["status"], "available"),
			q.Get("bound_to") != "",
			sel != nil && !sel.matches(img.Labels):
			continue
		}
		list = append(list, imageJSON(img))
	}
	writeList(w, r, "images", list, func(j jsonImage) int64 { return j.ID }, func(j jsonImage) string { return ptr.Deref(j.Name, "") })
}

func (s *StandIn) getImage(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	img := s.opts.Catalog.image(strconv.FormatInt(id, 10), "")
	if img == nil {
		writeError(w, notFound("image", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"image": imageJSON(img)})
}

// GET /pricing
func (s *StandIn) getPricing(w http.ResponseWriter, r *http.Request) {
	type typePrices struct {
		ID     int64                 `json:"id"`
		Name   string                `json:"name"`
		Prices []jsonServerTypePrice `json:"prices"`
	}
	var types []typePrices
	for i := range s.opts.Catalog.ServerTypes {
		t := &s.opts.Catalog.ServerTypes[i]
		types = append(types, typePrices{ID: t.ID, Name: t.Name, Prices: serverTypePrices(t)})
	}
	type locationPrice struct {
		Location     string    `json:"location"`
		PriceHourly  jsonPrice `json:"price_hourly"`
		PriceMonthly jsonPrice `json:"price_monthly"`
	}
	type monthly struct {
		Location     string    `json:"location"`
		PriceMonthly jsonPrice `json:"price_monthly"`
	}
	var floating []monthly
	var primary, primaryV6 []locationPrice
	for _, l := range s.opts.Catalog.Locations {
		primary = append(primary, locationPrice{Location: l.Name, PriceHourly: newPrice(0.0008), PriceMonthly: newPrice(0.5)})
		primaryV6 = append(primaryV6, locationPrice{Location: l.Name, PriceHourly: newPrice(0), PriceMonthly: newPrice(0)})
		floating = append(floating, monthly{Location: l.Name, PriceMonthly: newPrice(3)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"pricing": map[string]any{
		"currency":            "EUR",
		"vat_rate":            fmt.Sprintf("%.2f", VATRate*100),
		"image":               map[string]any{"price_per_gb_month": newPrice(0.011)},
		"floating_ip":         map[string]any{"price_monthly": newPrice(3)},
		"floating_ips":        []any{map[string]any{"type": "ipv4", "prices": floating}, map[string]any{"type": "ipv6", "prices": floating}},
		"primary_ips":         []any{map[string]any{"type": "ipv4", "prices": primary}, map[string]any{"type": "ipv6", "prices": primaryV6}},
		"traffic":             map[string]any{"price_per_tb": newPrice(0)},
		"server_backup":       map[string]any{"percentage": "20.00"},
		"server_types":        types,
		"load_balancer_types": []any{},
		"volume":              map[string]any{"price_per_gb_month": newPrice(0.044)},
	}})
}

// serveMetadata answers a server's requests to its metadata service, which the stand-in
// serves at /metadata/<server-id>/ for what a server reaches at http://169.254.169.254/
// (docs.hetzner.cloud "Server Metadata"). It is neither authenticated nor rate limited.
func (s *StandIn) serveMetadata(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/metadata/")
	idText, path, _ := strings.Cut(rest, "/")
	id, err := strconv.ParseInt(idText, 10, 64)
	if r.Method != http.MethodGet || err != nil {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	srv, ok := s.servers[id]
	var fields map[string]string
	var userData, privateNets string
	if ok {
		fields = map[string]string{
			"hostname":          srv.name,
			"instance-id":       strconv.FormatInt(srv.id, 10),
			"public-ipv4":       "",
			"availability-zone": srv.location.Datacenter,
			"region":            srv.location.NetworkZone,
		}
		if srv.ipv4 != nil {
			fields["public-ipv4"] = srv.ipv4.ip
		}
		userData = srv.userData
		privateNets = s.privateNetworksYAML(srv)
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch path {
	case "hetzner/v1/userdata":
		_, _ = w.Write([]byte(userData))
	case "hetzner/v1/metadata", "hetzner/v1/metadata/":
		for _, k := range []string{"availability-zone", "hostname", "instance-id", "public-ipv4", "region"} {
			fmt.Fprintf(w, "%s: %s\n", k, fields[k])
		}
	case "hetzner/v1/metadata/private-networks":
		_, _ = w.Write([]byte(privateNets))
	default:
		key, ok := strings.CutPrefix(path, "hetzner/v1/metadata/")
		value, known := fields[key]
		if !ok || !known {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(value))
	}
}

// privateNetworksYAML is the metadata service's private-networks document. Callers hold
// s.mu.
func (s *StandIn) privateNetworksYAML(srv *server) string {
	var b strings.Builder
	for i, pn := range srv.privateNets {
		n := s.networks[pn.network]
		if n == nil {
			continue
		}
		var sub *subnet
		if addr, err := netip.ParseAddr(pn.ip); err == nil {
			for j := range n.subnets {
				if n.subnets[j].ipRange.Contains(addr) {
					sub = &n.subnets[j]
				}
			}
		}
		fmt.Fprintf(&b, "- ip: %s\n  alias_ips: []\n  interface_num: %d\n  mac_address: %s\n  network_id: %d\n  network_name: %s\n  network: %s\n",
			pn.ip, i+1, pn.mac, n.id, n.name, n.ipRange)
		if sub != nil {
			fmt.Fprintf(&b, "  subnet: %s\n  gateway: %s\n", sub.ipRange, sub.gateway)
		}
	}
	return b.String()
}
