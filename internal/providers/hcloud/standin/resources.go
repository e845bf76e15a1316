// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"crypto/md5" //nolint:gosec // the API's SSH key fingerprint is MD5
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

type firewall struct {
	id      int64
	name    string
	labels  map[string]string
	created time.Time
	rules   []jsonFirewallRule
}

func (s *StandIn) firewallJSON(f *firewall) jsonFirewall {
	j := jsonFirewall{ID: f.id, Name: f.name, Labels: maps.Clone(f.labels), Created: apiTime(f.created),
		Rules: append([]jsonFirewallRule{}, f.rules...), AppliedTo: []jsonFirewallResource{}}
	for _, id := range sortedServerIDs(s.servers) {
		for _, fw := range s.servers[id].firewalls {
			if fw == f.id {
				j.AppliedTo = append(j.AppliedTo, jsonFirewallResource{Type: "server", Server: &jsonResourceID{ID: id}})
			}
		}
	}
	return j
}

func sortedServerIDs(servers map[int64]*server) []int64 {
	return slices.Sorted(maps.Keys(servers))
}

// POST /firewalls: {name, labels, rules}; applying to resources at creation is not
// modelled.
func (s *StandIn) createFirewall(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name    string             `json:"name"`
		Labels  map[string]string  `json:"labels"`
		Rules   []jsonFirewallRule `json:"rules"`
		ApplyTo []any              `json:"apply_to"`
	}
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Name == "" {
		writeError(w, invalidInput("name", "is required"))
		return
	}
	if err := validateLabels(req.Labels); err != nil {
		writeError(w, invalidInput("labels", err.Error()))
		return
	}
	if len(req.ApplyTo) > 0 {
		writeError(w, invalidInput("apply_to", "applying a firewall at creation is not supported by the stand-in"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, other := range s.firewalls {
		if other.name == req.Name {
			writeError(w, newError(CodeUniquenessError, "firewall name is already used"))
			return
		}
	}
	f := &firewall{id: s.nextID("firewall"), name: req.Name, labels: maps.Clone(req.Labels), created: time.Now(), rules: req.Rules}
	if f.labels == nil {
		f.labels = map[string]string{}
	}
	s.firewalls[f.id] = f
	writeJSON(w, http.StatusCreated, map[string]any{"firewall": s.firewallJSON(f), "actions": []jsonAction{}})
}

func (s *StandIn) listFirewalls(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, e := labelFilter(q)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	var list []jsonFirewall
	for _, f := range s.firewalls {
		if (q.Get("name") == "" || f.name == q.Get("name")) && (sel == nil || sel.matches(f.labels)) {
			list = append(list, s.firewallJSON(f))
		}
	}
	s.mu.Unlock()
	writeList(w, r, "firewalls", list, func(j jsonFirewall) int64 { return j.ID }, func(j jsonFirewall) string { return j.Name })
}

func (s *StandIn) getFirewall(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	f, ok := s.firewalls[id]
	var j jsonFirewall
	if ok {
		j = s.firewallJSON(f)
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, notFound("firewall", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"firewall": j})
}

func (s *StandIn) deleteFirewall(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.firewalls[id]
	if !ok {
		writeError(w, notFound("firewall", id))
		return
	}
	if len(s.firewallJSON(f).AppliedTo) > 0 {
		writeError(w, newError(CodeResourceInUse, "firewall %d is still applied to servers", id))
		return
	}
	delete(s.firewalls, id)
	w.WriteHeader(http.StatusNoContent)
}

type placementGroup struct {
	id      int64
	name    string
	labels  map[string]string
	created time.Time
}

func (s *StandIn) placementGroupJSON(pg *placementGroup) jsonPlacementGroup {
	servers := s.serversIn(pg.id)
	if servers == nil {
		servers = []int64{}
	}
	return jsonPlacementGroup{ID: pg.id, Name: pg.name, Labels: maps.Clone(pg.labels), Type: "spread", Created: apiTime(pg.created), Servers: servers}
}

// POST /placement_groups: {name, type: spread, labels}.
func (s *StandIn) createPlacementGroup(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name   string            `json:"name"`
		Type   string            `json:"type"`
		Labels map[string]string `json:"labels"`
	}
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case req.Name == "":
		writeError(w, invalidInput("name", "is required"))
		return
	case req.Type != "spread":
		writeError(w, invalidInput("type", "must be spread"))
		return
	}
	if err := validateLabels(req.Labels); err != nil {
		writeError(w, invalidInput("labels", err.Error()))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, other := range s.placementGroups {
		if other.name == req.Name {
			writeError(w, newError(CodeUniquenessError, "placement group name is already used"))
			return
		}
	}
	pg := &placementGroup{id: s.nextID("placement_group"), name: req.Name, labels: maps.Clone(req.Labels), created: time.Now()}
	if pg.labels == nil {
		pg.labels = map[string]string{}
	}
	s.placementGroups[pg.id] = pg
	writeJSON(w, http.StatusCreated, map[string]any{"placement_group": s.placementGroupJSON(pg), "action": nil})
}

func (s *StandIn) listPlacementGroups(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, e := labelFilter(q)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	var list []jsonPlacementGroup
	for _, pg := range s.placementGroups {
		if (q.Get("name") == "" || pg.name == q.Get("name")) && (sel == nil || sel.matches(pg.labels)) {
			list = append(list, s.placementGroupJSON(pg))
		}
	}
	s.mu.Unlock()
	writeList(w, r, "placement_groups", list, func(j jsonPlacementGroup) int64 { return j.ID }, func(j jsonPlacementGroup) string { return j.Name })
}

func (s *StandIn) getPlacementGroup(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	pg, ok := s.placementGroups[id]
	var j jsonPlacementGroup
	if ok {
		j = s.placementGroupJSON(pg)
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, notFound("placement group", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"placement_group": j})
}

func (s *StandIn) deletePlacementGroup(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.placementGroups[id]; !ok {
		writeError(w, notFound("placement group", id))
		return
	}
	if len(s.serversIn(id)) > 0 {
		writeError(w, newError(CodeResourceInUse, "placement group %d still holds servers", id))
		return
	}
	delete(s.placementGroups, id)
	w.WriteHeader(http.StatusNoContent)
}

type sshKey struct {
	id          int64
	name        string
	fingerprint string
	publicKey   string
	labels      map[string]string
	created     time.Time
}

func (k *sshKey) json() jsonSSHKey {
	return jsonSSHKey{ID: k.id, Name: k.name, Fingerprint: k.fingerprint, PublicKey: k.publicKey, Labels: maps.Clone(k.labels), Created: apiTime(k.created)}
}

// sshKey finds a key by ID or name. Callers hold s.mu.
func (s *StandIn) sshKey(ref string) *sshKey {
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		return s.sshKeys[id]
	}
	for _, k := range s.sshKeys {
		if k.name == ref {
			return k
		}
	}
	return nil
}

// fingerprint is the MD5 fingerprint of an OpenSSH public key line, as the API shows it.
func fingerprint(publicKey string) (string, error) {
	fields := strings.Fields(publicKey)
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "ssh-") && !strings.HasPrefix(fields[0], "ecdsa-") {
		return "", fmt.Errorf("is not an OpenSSH public key")
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil || len(blob) < 4 {
		return "", fmt.Errorf("is not an OpenSSH public key")
	}
	sum := md5.Sum(blob) //nolint:gosec // the API's SSH key fingerprint is MD5
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02x", b)
	}
	return strings.Join(parts, ":"), nil
}

// POST /ssh_keys: {name, public_key, labels}.
func (s *StandIn) createSSHKey(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name      string            `json:"name"`
		PublicKey string            `json:"public_key"`
		Labels    map[string]string `json:"labels"`
	}
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Name == "" {
		writeError(w, invalidInput("name", "is required"))
		return
	}
	fp, err := fingerprint(req.PublicKey)
	if err != nil {
		writeError(w, invalidInput("public_key", err.Error()))
		return
	}
	if err := validateLabels(req.Labels); err != nil {
		writeError(w, invalidInput("labels", err.Error()))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.sshKeys {
		if k.name == req.Name || k.fingerprint == fp {
			field := "name"
			if k.fingerprint == fp {
				field = "public_key"
			}
			e := newError(CodeUniquenessError, "SSH key with the same %s already exists", strings.ReplaceAll(field, "_", " "))
			e.details = map[string]any{"fields": []map[string]any{{"name": field}}}
			writeError(w, e)
			return
		}
	}
	k := &sshKey{id: s.nextID("ssh_key"), name: req.Name, fingerprint: fp, publicKey: strings.TrimSpace(req.PublicKey), labels: maps.Clone(req.Labels), created: time.Now()}
	if k.labels == nil {
		k.labels = map[string]string{}
	}
	s.sshKeys[k.id] = k
	writeJSON(w, http.StatusCreated, map[string]any{"ssh_key": k.json()})
}

// GET /ssh_keys: name, fingerprint, label_selector, sort, page, per_page.
func (s *StandIn) listSSHKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, e := labelFilter(q)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	var list []jsonSSHKey
	for _, k := range s.sshKeys {
		if (q.Get("name") == "" || k.name == q.Get("name")) && (q.Get("fingerprint") == "" || k.fingerprint == q.Get("fingerprint")) &&
			(sel == nil || sel.matches(k.labels)) {
			list = append(list, k.json())
		}
	}
	s.mu.Unlock()
	writeList(w, r, "ssh_keys", list, func(j jsonSSHKey) int64 { return j.ID }, func(j jsonSSHKey) string { return j.Name })
}

func (s *StandIn) getSSHKey(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	k, ok := s.sshKeys[id]
	var j jsonSSHKey
	if ok {
		j = k.json()
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, notFound("ssh key", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ssh_key": j})
}

func (s *StandIn) deleteSSHKey(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sshKeys[id]; !ok {
		writeError(w, notFound("ssh key", id))
		return
	}
	delete(s.sshKeys, id)
	w.WriteHeader(http.StatusNoContent)
}
