// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Server states (docs.hetzner.cloud "Servers").
const (
	statusInitializing = "initializing"
	statusStarting     = "starting"
	statusRunning      = "running"
	statusStopping     = "stopping"
	statusOff          = "off"
	statusDeleting     = "deleting"
)

// MaxUserData is the most user data a server takes ("This field is limited to 32KiB").
const MaxUserData = 32 << 10

// maxSpreadGroup is how many servers a spread placement group holds.
const maxSpreadGroup = 10

type server struct {
	id             int64
	name           string
	status         string
	created        time.Time
	serverType     *ServerType
	location       *Location
	image          *Image
	labels         map[string]string
	userData       string
	sshKeys        []int64
	ipv4, ipv6     *publicIP
	privateNets    []privateNet
	firewalls      []int64
	placementGroup int64
	protection     jsonServerProtection
	// machineOn is whether its machine runs (Machines.Boot was called and no power-off since).
	machineOn bool
}

type publicIP struct {
	id int64
	ip string // IPv4 address, or IPv6 network (2001:db8:1::/64)
}

type privateNet struct {
	network  int64
	ip       string
	aliasIPs []string
	mac      string
}

// Server is a server as the stand-in holds it, for assertions.
type Server struct {
	ID         int64
	Name       string
	Status     string
	Created    time.Time
	ServerType string
	Location   string
	// Image is the name of the image it was created from (empty for a snapshot), ImageID
	// its ID.
	Image   string
	ImageID int64
	Labels  map[string]string
	// UserData is exactly what the server was created with.
	UserData       []byte
	SSHKeys        []int64
	PublicIPv4     string
	PublicIPv6     string
	PrivateNets    []PrivateNet
	Firewalls      []int64
	PlacementGroup int64
}

// PrivateNet is a server's attachment to a network.
type PrivateNet struct {
	Network int64
	IP      string
}

func (srv *server) view() Server {
	v := Server{ID: srv.id, Name: srv.name, Status: srv.status, Created: srv.created, ServerType: srv.serverType.Name,
		Location: srv.location.Name, Image: srv.image.Name, ImageID: srv.image.ID, Labels: maps.Clone(srv.labels), UserData: []byte(srv.userData),
		SSHKeys: slices.Clone(srv.sshKeys), Firewalls: slices.Clone(srv.firewalls), PlacementGroup: srv.placementGroup}
	if srv.ipv4 != nil {
		v.PublicIPv4 = srv.ipv4.ip
	}
	if srv.ipv6 != nil {
		v.PublicIPv6 = strings.TrimSuffix(srv.ipv6.ip, "/64") + "1"
	}
	for _, n := range srv.privateNets {
		v.PrivateNets = append(v.PrivateNets, PrivateNet{Network: n.network, IP: n.ip})
	}
	return v
}

// Servers returns every server of the project, ordered by ID.
func (s *StandIn) Servers() []Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Server, 0, len(s.servers))
	for _, srv := range s.servers {
		out = append(out, srv.view())
	}
	slices.SortFunc(out, func(a, b Server) int { return compare(a.ID, b.ID) })
	return out
}

// Server returns one server.
func (s *StandIn) Server(id int64) (Server, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, ok := s.servers[id]
	if !ok {
		return Server{}, false
	}
	return srv.view(), true
}

// deprecationNotice is what a deprecated server type's deprecation says.
var deprecationNotice = map[string]apiTime{
	"announced":         apiTime(catalogCreated),
	"unavailable_after": apiTime(catalogCreated.AddDate(0, 0, 90)),
}

func (s *StandIn) serverTypeJSON(t *ServerType) jsonServerType {
	j := jsonServerType{ID: t.ID, Name: t.Name, Description: t.Description, Category: t.Category, Cores: t.Cores,
		Memory: t.MemoryGB, Disk: t.DiskGB, Prices: serverTypePrices(t), StorageType: "local", CPUType: t.CPUType,
		Architecture: t.Architecture, Locations: []jsonServerTypeLocation{}}
	for _, p := range t.Prices {
		if l := s.opts.Catalog.location(p.Location); l != nil {
			available := !s.faults.stockouts[offering{t.Name, l.Name}]
			loc := jsonServerTypeLocation{ID: l.ID, Name: l.Name, Available: available, Recommended: available && !t.Deprecated}
			if t.Deprecated {
				loc.Deprecation = deprecationNotice
			}
			j.Locations = append(j.Locations, loc)
		}
	}
	if t.Deprecated {
		j.Deprecated, j.Deprecation = true, deprecationNotice
	}
	return j
}

// serverJSON renders a server. Callers hold s.mu.
func (s *StandIn) serverJSON(srv *server) jsonServer {
	img := imageJSON(srv.image)
	price, _ := srv.serverType.price(srv.location.Name)
	j := jsonServer{
		ID: srv.id, Name: srv.name, Status: srv.status, Created: apiTime(srv.created),
		PublicNet:  jsonServerPublicNet{FloatingIPs: []int64{}, Firewalls: []jsonServerFirewall{}},
		PrivateNet: []jsonServerPrivateNet{}, ServerType: s.serverTypeJSON(srv.serverType),
		Location: locationJSON(srv.location), Image: &img, Locked: s.runningOn("server", srv.id),
		IncludedTraffic: int64(price.IncludedTrafficTB) * terabyte, Protection: srv.protection,
		Labels: maps.Clone(srv.labels), Volumes: []int64{}, LoadBalancers: []int64{}, PrimaryDiskSize: srv.serverType.DiskGB,
	}
	zero := int64(0)
	j.OutgoingTraffic, j.IngoingTraffic = &zero, &zero
	if srv.ipv4 != nil {
		j.PublicNet.IPv4 = &jsonServerPublicNetIPv4{ID: srv.ipv4.id, IP: srv.ipv4.ip, DNSPtr: "static." + reverse(srv.ipv4.ip) + ".clients.your-server.de"}
	}
	if srv.ipv6 != nil {
		j.PublicNet.IPv6 = &jsonServerPublicNetIPv6{ID: srv.ipv6.id, IP: srv.ipv6.ip, DNSPtr: []jsonDNSPtr{}}
	}
	for _, id := range srv.firewalls {
		j.PublicNet.Firewalls = append(j.PublicNet.Firewalls, jsonServerFirewall{ID: id, Status: "applied"})
	}
	for _, n := range srv.privateNets {
		j.PrivateNet = append(j.PrivateNet, jsonServerPrivateNet{Network: n.network, IP: n.ip, AliasIPs: append([]string{}, n.aliasIPs...), MACAddress: n.mac})
	}
	if pg, ok := s.placementGroups[srv.placementGroup]; ok {
		pj := s.placementGroupJSON(pg)
		j.PlacementGroup = &pj
	}
	if j.Labels == nil {
		j.Labels = map[string]string{}
	}
	return j
}

func reverse(ip string) string {
	parts := strings.Split(ip, ".")
	slices.Reverse(parts)
	return strings.Join(parts, ".")
}

// serverName: "Server names must be unique per Project and valid hostnames as per RFC 1123".
var serverName = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)

type createServerRequest struct {
	Name             string            `json:"name"`
	ServerType       json.RawMessage   `json:"server_type"`
	Image            json.RawMessage   `json:"image"`
	Location         json.RawMessage   `json:"location"`
	Datacenter       json.RawMessage   `json:"datacenter"`
	SSHKeys          []json.RawMessage `json:"ssh_keys"`
	UserData         *string           `json:"user_data"`
	StartAfterCreate *bool             `json:"start_after_create"`
	Labels           map[string]string `json:"labels"`
	Volumes          []int64           `json:"volumes"`
	Networks         []int64           `json:"networks"`
	Firewalls        []struct {
		Firewall int64 `json:"firewall"`
	} `json:"firewalls"`
	PlacementGroup int64 `json:"placement_group"`
	PublicNet      *struct {
		EnableIPv4 *bool  `json:"enable_ipv4"`
		EnableIPv6 *bool  `json:"enable_ipv6"`
		IPv4       *int64 `json:"ipv4"`
		IPv6       *int64 `json:"ipv6"`
	} `json:"public_net"`
}

// POST /servers
func (s *StandIn) createServer(w http.ResponseWriter, r *http.Request) {
	var req createServerRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	resp, e := s.create(req)
	hook := s.afterCreate
	var created Server
	if e == nil && hook != nil {
		created = s.servers[resp["server"].(jsonServer).ID].view()
	}
	s.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
	if hook != nil {
		// The client has the whole answer before the hook runs (writeJSON sets its length).
		_ = http.NewResponseController(w).Flush()
		hook(created)
	}
}

// AfterCreate sets a function the stand-in calls with every server it creates, once the
// create's answer was sent and before the request ends (nil: none). Tests act through it at
// that moment: kill the client that created the server before it could record it.
func (s *StandIn) AfterCreate(fn func(Server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterCreate = fn
}

// create validates a create request and creates the server. Callers hold s.mu.
func (s *StandIn) create(req createServerRequest) (map[string]any, *apiError) {
	cat := s.opts.Catalog
	if req.Name == "" || len(req.Name) > 253 || !serverName.MatchString(req.Name) {
		return nil, invalidInput("name", "must be a valid hostname as per RFC 1123")
	}
	typeName, ok := idOrName(req.ServerType)
	if !ok {
		return nil, invalidInput("server_type", "is required")
	}
	st := cat.serverType(typeName)
	if st == nil {
		return nil, invalidInput("server_type", fmt.Sprintf("server type %s not found", typeName))
	}
	imageName, ok := idOrName(req.Image)
	if !ok {
		return nil, invalidInput("image", "is required")
	}
	img := cat.image(imageName, st.Architecture)
	if img == nil {
		return nil, invalidInput("image", fmt.Sprintf("image %s not found for architecture %s", imageName, st.Architecture))
	}
	if img.Architecture != st.Architecture {
		return nil, invalidInput("image", fmt.Sprintf("image %s is for architecture %s, server type %s is %s", imageName, img.Architecture, st.Name, st.Architecture))
	}
	if len(req.Datacenter) > 0 && string(req.Datacenter) != "null" {
		return nil, invalidInput("datacenter", "the datacenter property was removed, use location")
	}
	var loc *Location
	if name, ok := idOrName(req.Location); ok {
		if loc = cat.location(name); loc == nil {
			return nil, invalidInput("location", fmt.Sprintf("location %s not found", name))
		}
	} else {
		for _, p := range st.Prices {
			if l := cat.location(p.Location); l != nil && !s.faults.stockouts[offering{st.Name, l.Name}] {
				loc = l
				break
			}
		}
		if loc == nil {
			return nil, newError(CodeResourceUnavailable, "server type %s is unavailable in every location", st.Name)
		}
	}
	if _, offered := st.price(loc.Name); !offered {
		return nil, invalidInput("server_type", fmt.Sprintf("server type %s is not available in location %s", st.Name, loc.Name))
	}
	if err := validateLabels(req.Labels); err != nil {
		return nil, invalidInput("labels", err.Error())
	}
	userData := ""
	if req.UserData != nil {
		userData = *req.UserData
	}
	if len(userData) > MaxUserData {
		return nil, invalidInput("user_data", fmt.Sprintf("is too long (%d bytes, at most %d)", len(userData), MaxUserData))
	}
	if len(req.Volumes) > 0 {
		return nil, invalidInput("volumes", fmt.Sprintf("volume %d not found", req.Volumes[0]))
	}
	var keys []int64
	for _, raw := range req.SSHKeys {
		ref, _ := idOrName(raw)
		k := s.sshKey(ref)
		if k == nil {
			return nil, invalidInput("ssh_keys", fmt.Sprintf("ssh key %s not found", ref))
		}
		keys = append(keys, k.id)
	}
	for _, id := range req.Networks {
		n, ok := s.networks[id]
		if !ok {
			return nil, invalidInput("networks", fmt.Sprintf("network %d not found", id))
		}
		if n.subnetFor(loc.NetworkZone) == nil {
			return nil, newError(CodeNoSubnetAvailable, "network %d has no subnet in network zone %s", id, loc.NetworkZone)
		}
	}
	var fws []int64
	for _, f := range req.Firewalls {
		if _, ok := s.firewalls[f.Firewall]; !ok {
			return nil, invalidInput("firewalls", fmt.Sprintf("firewall %d not found", f.Firewall))
		}
		fws = append(fws, f.Firewall)
	}
	if req.PlacementGroup != 0 {
		pg, ok := s.placementGroups[req.PlacementGroup]
		if !ok {
			return nil, invalidInput("placement_group", fmt.Sprintf("placement group %d not found", req.PlacementGroup))
		}
		if len(s.serversIn(pg.id)) >= maxSpreadGroup {
			return nil, newError(CodePlacementError, "placement group %s already holds %d servers, the most a spread group can", pg.name, maxSpreadGroup)
		}
	}
	enableV4, enableV6 := true, true
	if pn := req.PublicNet; pn != nil {
		if pn.IPv4 != nil || pn.IPv6 != nil {
			return nil, invalidInput("public_net", "assigning existing primary IPs is not supported by the stand-in")
		}
		if pn.EnableIPv4 != nil {
			enableV4 = *pn.EnableIPv4
		}
		if pn.EnableIPv6 != nil {
			enableV6 = *pn.EnableIPv6
		}
	}
	for _, other := range s.servers {
		if other.name == req.Name {
			e := newError(CodeUniquenessError, "server name is already used")
			e.details = map[string]any{"fields": []map[string]any{{"name": "name"}}}
			return nil, e
		}
	}
	if limit := s.faults.serverLimit; limit > 0 && len(s.servers) >= limit {
		e := newError(CodeResourceLimitExceeded, "server limit exceeded")
		e.details = map[string]any{"limits": []map[string]any{{"name": "server_limit"}}}
		return nil, e
	}
	if s.faults.stockouts[offering{st.Name, loc.Name}] {
		return nil, newError(CodeResourceUnavailable, "server type %s is unavailable in location %s", st.Name, loc.Name)
	}
	if s.faults.placement[offering{st.Name, loc.Name}] {
		return nil, newError(CodePlacementError, "an error during the placement of the server occurred")
	}

	srv := &server{id: s.nextID("server"), name: req.Name, status: statusInitializing, created: time.Now(),
		serverType: st, location: loc, image: img, labels: maps.Clone(req.Labels), userData: userData, sshKeys: keys,
		firewalls: fws, placementGroup: req.PlacementGroup}
	if srv.labels == nil {
		srv.labels = map[string]string{}
	}
	s.addresses++
	if enableV4 {
		srv.ipv4 = &publicIP{id: s.nextID("primary_ip"), ip: fmt.Sprintf("100.%d.%d.%d", 64+s.addresses>>16&63, s.addresses>>8&255, s.addresses&255)}
	}
	if enableV6 {
		srv.ipv6 = &publicIP{id: s.nextID("primary_ip"), ip: fmt.Sprintf("2001:db8:%x::/64", s.addresses)}
	}
	for _, id := range req.Networks {
		if err := s.attach(srv, s.networks[id], "", nil); err != nil {
			// A full subnet, or a network named twice: the server is not created.
			s.releaseAddresses(srv)
			return nil, err
		}
	}
	s.servers[srv.id] = srv
	ref := jsonResourceRef{ID: srv.id, Type: "server"}
	createDuration, startDuration := s.faults.createDuration, s.faults.actionDuration
	create := s.newAction("create_server", createDuration, ref)
	start := req.StartAfterCreate == nil || *req.StartAfterCreate
	next := []jsonAction{}
	var startAction *action
	if start {
		startAction = s.newAction("start_server", createDuration+startDuration, ref)
		next = append(next, startAction.json(time.Now()))
	}
	s.after(createDuration, func() {
		s.mu.Lock()
		create.finish(nil)
		if srv.status == statusInitializing {
			srv.status = statusOff
			if start {
				srv.status = statusStarting
			}
		}
		s.mu.Unlock()
		if start {
			s.after(startDuration, func() { s.powerOn(srv, startAction) })
		}
	})
	var password *string
	if len(keys) == 0 {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		p := hex.EncodeToString(b)
		password = &p
	}
	return map[string]any{"server": s.serverJSON(srv), "action": create.json(time.Now()), "next_actions": next, "root_password": password}, nil
}

// powerOn finishes a start action: the server runs and its machine boots.
func (s *StandIn) powerOn(srv *server, a *action) {
	s.mu.Lock()
	a.finish(nil)
	if _, exists := s.servers[srv.id]; !exists || srv.status == statusDeleting {
		s.mu.Unlock()
		return
	}
	srv.status = statusRunning
	boot := !srv.machineOn && s.opts.Machines != nil
	srv.machineOn = true
	m := s.machine(srv)
	s.mu.Unlock()
	if boot {
		if err := s.opts.Machines.Boot(m); err != nil {
			s.logf("machine of server %d (%s) did not boot: %v", srv.id, srv.name, err)
		} else {
			s.logf("machine of server %d (%s) powered on", srv.id, srv.name)
		}
	}
}

// machine describes a server's machine. Callers hold s.mu.
func (s *StandIn) machine(srv *server) Machine {
	m := Machine{ServerID: srv.id, Name: srv.name, ServerType: *srv.serverType, Location: srv.location.Name,
		UserData: []byte(srv.userData), MetadataURL: s.MetadataURL(srv.id), Image: *srv.image}
	v := srv.view()
	m.PublicIPv4, m.PublicIPv6 = v.PublicIPv4, v.PublicIPv6
	for _, n := range srv.privateNets {
		m.PrivateIPs = append(m.PrivateIPs, n.ip)
	}
	return m
}

// GET /servers: name, label_selector, status, sort, page, per_page.
func (s *StandIn) listServers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, e := labelFilter(q)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	var list []jsonServer
	for _, srv := range s.servers {
		if n := q.Get("name"); n != "" && srv.name != n {
			continue
		}
		if st := q["status"]; len(st) > 0 && !contains(st, srv.status) {
			continue
		}
		if sel != nil && !sel.matches(srv.labels) {
			continue
		}
		list = append(list, s.serverJSON(srv))
	}
	s.mu.Unlock()
	if e := sortItems(r, list, func(j jsonServer) int64 { return j.ID }, map[string]func(a, b jsonServer) int{
		"name":    func(a, b jsonServer) int { return compare(a.Name, b.Name) },
		"created": func(a, b jsonServer) int { return compareTime(time.Time(a.Created), time.Time(b.Created)) },
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
		page = []jsonServer{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": page, "meta": meta})
}

// lookupServer finds the server of the path's id. Callers hold s.mu.
func (s *StandIn) lookupServer(r *http.Request) (*server, *apiError) {
	id, e := pathID(r)
	if e != nil {
		return nil, e
	}
	srv, ok := s.servers[id]
	if !ok {
		return nil, notFound("server", id)
	}
	return srv, nil
}

// GET /servers/{id}
func (s *StandIn) getServer(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	srv, e := s.lookupServer(r)
	var j jsonServer
	if e == nil {
		j = s.serverJSON(srv)
	}
	s.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": j})
}

// PUT /servers/{id}: name and labels.
func (s *StandIn) updateServer(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name   *string            `json:"name"`
		Labels *map[string]string `json:"labels"`
	}
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, e := s.lookupServer(r)
	if e != nil {
		writeError(w, e)
		return
	}
	if req.Name != nil {
		if !serverName.MatchString(*req.Name) {
			writeError(w, invalidInput("name", "must be a valid hostname as per RFC 1123"))
			return
		}
		for _, other := range s.servers {
			if other != srv && other.name == *req.Name {
				writeError(w, newError(CodeUniquenessError, "server name is already used"))
				return
			}
		}
		srv.name = *req.Name
	}
	if req.Labels != nil {
		if err := validateLabels(*req.Labels); err != nil {
			writeError(w, invalidInput("labels", err.Error()))
			return
		}
		srv.labels = maps.Clone(*req.Labels)
		if srv.labels == nil {
			srv.labels = map[string]string{}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": s.serverJSON(srv)})
}

// DELETE /servers/{id}: the machine is removed at once; the server is gone when the
// action ends.
func (s *StandIn) deleteServer(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	srv, e := s.lookupServer(r)
	if e == nil && s.runningOn("server", srv.id) {
		e = newError(CodeLocked, "server %d is locked: another action is running", srv.id)
	}
	if e == nil && srv.protection.Delete {
		e = newError("protected", "server %d is protected against deletion", srv.id)
		e.status = http.StatusLocked
	}
	if e != nil {
		s.mu.Unlock()
		writeError(w, e)
		return
	}
	srv.status = statusDeleting
	d := s.faults.actionDuration
	a := s.newAction("delete_server", d, jsonResourceRef{ID: srv.id, Type: "server"})
	wasOn := srv.machineOn
	srv.machineOn = false
	j := a.json(time.Now())
	s.mu.Unlock()
	s.inBackground(func() {
		if wasOn && s.opts.Machines != nil {
			if err := s.opts.Machines.Remove(srv.id); err != nil {
				s.logf("removing the machine of server %d: %v", srv.id, err)
			}
		}
	}, d, func() {
		delete(s.servers, srv.id)
		for _, n := range s.networks {
			n.servers = slices.DeleteFunc(n.servers, func(id int64) bool { return id == srv.id })
		}
		a.finish(nil)
	})
	writeJSON(w, http.StatusOK, map[string]any{"action": j})
}

// inBackground runs op at once and, once both op has returned and d has passed, done with
// s.mu held.
func (s *StandIn) inBackground(op func(), d time.Duration, done func()) {
	opDone := make(chan struct{})
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		defer close(opDone)
		op()
	}()
	s.after(d, func() {
		<-opDone
		s.mu.Lock()
		defer s.mu.Unlock()
		done()
	})
}

// POST /servers/{id}/actions/{action}
func (s *StandIn) serverAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("action")
	var body map[string]json.RawMessage
	if e := decode(r, &body); e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	srv, e := s.lookupServer(r)
	if e == nil && s.runningOn("server", srv.id) {
		e = newError(CodeLocked, "server %d is locked: another action is running", srv.id)
	}
	if e != nil {
		s.mu.Unlock()
		writeError(w, e)
		return
	}
	ref := jsonResourceRef{ID: srv.id, Type: "server"}
	var a *action
	switch name {
	case "poweron":
		a = s.newAction("start_server", s.faults.actionDuration, ref)
		if srv.status == statusOff {
			srv.status = statusStarting
		}
		s.after(s.faults.actionDuration, func() { s.powerOn(srv, a) })
	case "poweroff", "shutdown":
		command := map[string]string{"poweroff": "stop_server", "shutdown": "shutdown_server"}[name]
		a = s.newAction(command, s.faults.actionDuration, ref)
		wasOn := srv.machineOn
		srv.machineOn = false
		if srv.status == statusRunning || srv.status == statusStarting {
			srv.status = statusStopping
		}
		s.inBackground(func() {
			if wasOn && s.opts.Machines != nil {
				if err := s.opts.Machines.PowerOff(srv.id); err != nil {
					s.logf("powering off the machine of server %d: %v", srv.id, err)
				}
			}
		}, s.faults.actionDuration, func() {
			if srv.status == statusStopping {
				srv.status = statusOff
			}
			a.finish(nil)
		})
	case "attach_to_network":
		a, e = s.attachAction(srv, body)
	case "detach_from_network":
		a, e = s.detachAction(srv, body)
	case "change_protection":
		var p struct {
			Delete  *bool `json:"delete"`
			Rebuild *bool `json:"rebuild"`
		}
		raw, _ := json.Marshal(body)
		_ = json.Unmarshal(raw, &p)
		if p.Delete != nil {
			srv.protection.Delete = *p.Delete
		}
		if p.Rebuild != nil {
			srv.protection.Rebuild = *p.Rebuild
		}
		a = s.newAction("change_protection", 0, ref)
		a.finish(nil)
	default:
		e = newError(CodeNotFound, "server action %s is not supported by the stand-in", name)
	}
	var j jsonAction
	if a != nil {
		j = a.json(time.Now())
	}
	s.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"action": j})
}

// serversIn lists the servers of a placement group. Callers hold s.mu.
func (s *StandIn) serversIn(group int64) []int64 {
	var ids []int64
	for _, srv := range s.servers {
		if srv.placementGroup == group {
			ids = append(ids, srv.id)
		}
	}
	slices.Sort(ids)
	return ids
}

func parseInt64(raw json.RawMessage) (int64, bool) {
	v, ok := idOrName(raw)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}
