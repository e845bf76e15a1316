// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"fmt"
	"time"
)

// Catalog is what a project can order: locations, server types with their prices, and the
// system images. The stand-in serves it from /locations, /server_types, /images and
// /pricing.
type Catalog struct {
	Locations   []Location
	ServerTypes []ServerType
	Images      []Image
}

// Location is a Hetzner Cloud location (fsn1, nbg1, ...).
type Location struct {
	ID          int64
	Name        string
	Description string
	Country     string
	City        string
	Latitude    float64
	Longitude   float64
	// NetworkZone is the zone of private networks the location belongs to (eu-central, ...).
	NetworkZone string
	// Datacenter is the name the metadata service reports as availability-zone (fsn1-dc14).
	Datacenter string
}

// ServerType is a plan (cx23, cpx32, ...).
type ServerType struct {
	ID           int64
	Name         string
	Description  string
	Category     string
	Cores        int
	MemoryGB     float64
	DiskGB       int
	CPUType      string // shared or dedicated
	Architecture string // x86 or arm
	// Prices per location; the type is offered where it has a price.
	Prices []Price
	// Deprecated types are still listed, with a deprecation notice.
	Deprecated bool
}

// Price is what a server type costs in one location, net, in EUR.
type Price struct {
	Location string
	Hourly   float64
	Monthly  float64
	// IncludedTrafficTB is the traffic included per month.
	IncludedTrafficTB int
}

// Image is a system image (each architecture has its own image of the same name) or a
// snapshot (Type snapshot: no name, labels, what Packer's hcloud builder makes).
type Image struct {
	ID           int64
	Name         string
	Description  string
	OSFlavor     string
	OSVersion    string
	Architecture string
	DiskSizeGB   float64
	// Type is "system" (the default) or "snapshot".
	Type string
	// Labels of a snapshot.
	Labels map[string]string
	// Created is when a snapshot was made; zero for catalogCreated.
	Created time.Time
}

// imageType is the image's type: system unless it is a snapshot.
func (img *Image) imageType() string {
	if img.Type == ImageSnapshot {
		return ImageSnapshot
	}
	return "system"
}

// ImageSnapshot is the type of a snapshot.
const ImageSnapshot = "snapshot"

// VATRate is the rate the stand-in's gross prices include.
const VATRate = 0.19

// catalogCreated is when the catalogue's images are said to have been created.
var catalogCreated = time.Date(2025, 4, 17, 8, 0, 0, 0, time.UTC)

// DefaultCatalog is a small copy of the public catalogue: six locations, a few x86 and arm
// server types and the usual images. Prices and sizes follow Hetzner's price list of late
// 2025 closely enough for tests; they are not authoritative.
func DefaultCatalog() *Catalog {
	eu := []string{"fsn1", "nbg1", "hel1"}
	all := []string{"fsn1", "nbg1", "hel1", "ash", "hil", "sin"}
	prices := func(hourly, monthly float64, tb int, where []string) []Price {
		out := make([]Price, 0, len(where))
		for _, l := range where {
			p := Price{Location: l, Hourly: hourly, Monthly: monthly, IncludedTrafficTB: tb}
			if l == "ash" || l == "hil" || l == "sin" {
				// Outside the EU: a little dearer and less traffic.
				p.Hourly, p.Monthly, p.IncludedTrafficTB = hourly*1.2, monthly*1.2, 1
			}
			out = append(out, p)
		}
		return out
	}
	c := &Catalog{
		Locations: []Location{
			{ID: 1, Name: "fsn1", Description: "Falkenstein DC Park 1", Country: "DE", City: "Falkenstein", Latitude: 50.47612, Longitude: 12.370071, NetworkZone: "eu-central", Datacenter: "fsn1-dc14"},
			{ID: 2, Name: "nbg1", Description: "Nuremberg DC Park 1", Country: "DE", City: "Nuremberg", Latitude: 49.452102, Longitude: 11.076665, NetworkZone: "eu-central", Datacenter: "nbg1-dc3"},
			{ID: 3, Name: "hel1", Description: "Helsinki DC Park 1", Country: "FI", City: "Helsinki", Latitude: 60.169855, Longitude: 24.938379, NetworkZone: "eu-central", Datacenter: "hel1-dc2"},
			{ID: 4, Name: "ash", Description: "Ashburn, VA", Country: "US", City: "Ashburn, VA", Latitude: 39.045821, Longitude: -77.487073, NetworkZone: "us-east", Datacenter: "ash-dc1"},
			{ID: 5, Name: "hil", Description: "Hillsboro, OR", Country: "US", City: "Hillsboro, OR", Latitude: 45.54222, Longitude: -122.951924, NetworkZone: "us-west", Datacenter: "hil-dc1"},
			{ID: 6, Name: "sin", Description: "Singapore", Country: "SG", City: "Singapore", Latitude: 1.283333, Longitude: 103.833333, NetworkZone: "ap-southeast", Datacenter: "sin-dc1"},
		},
		ServerTypes: []ServerType{
			{ID: 114, Name: "cx23", Description: "CX23", Category: "cost_optimized", Cores: 2, MemoryGB: 4, DiskGB: 40, CPUType: "shared", Architecture: "x86", Prices: prices(0.0056, 3.49, 20, eu)},
			{ID: 115, Name: "cx33", Description: "CX33", Category: "cost_optimized", Cores: 4, MemoryGB: 8, DiskGB: 80, CPUType: "shared", Architecture: "x86", Prices: prices(0.0088, 5.49, 20, eu)},
			{ID: 116, Name: "cx43", Description: "CX43", Category: "cost_optimized", Cores: 8, MemoryGB: 16, DiskGB: 160, CPUType: "shared", Architecture: "x86", Prices: prices(0.0152, 9.49, 20, eu)},
			{ID: 108, Name: "cpx22", Description: "CPX22", Category: "regular_purpose", Cores: 2, MemoryGB: 4, DiskGB: 80, CPUType: "shared", Architecture: "x86", Prices: prices(0.0104, 6.49, 20, all)},
			{ID: 109, Name: "cpx32", Description: "CPX32", Category: "regular_purpose", Cores: 4, MemoryGB: 8, DiskGB: 160, CPUType: "shared", Architecture: "x86", Prices: prices(0.0176, 10.99, 20, all)},
			{ID: 96, Name: "ccx13", Description: "CCX13 Dedicated CPU", Category: "general_purpose", Cores: 2, MemoryGB: 8, DiskGB: 80, CPUType: "dedicated", Architecture: "x86", Prices: prices(0.0224, 13.99, 20, all)},
			{ID: 45, Name: "cax11", Description: "CAX11", Category: "cost_optimized", Cores: 2, MemoryGB: 4, DiskGB: 40, CPUType: "shared", Architecture: "arm", Prices: prices(0.0064, 3.99, 20, []string{"fsn1", "nbg1", "hel1"})},
		},
	}
	id := int64(161547269)
	for _, img := range []struct{ name, desc, flavor, version string }{
		{"ubuntu-24.04", "Ubuntu 24.04", "ubuntu", "24.04"},
		{"ubuntu-22.04", "Ubuntu 22.04", "ubuntu", "22.04"},
		{"debian-13", "Debian 13", "debian", "13"},
		{"debian-12", "Debian 12", "debian", "12"},
	} {
		for _, arch := range []string{"x86", "arm"} {
			c.Images = append(c.Images, Image{ID: id, Name: img.name, Description: img.desc, OSFlavor: img.flavor,
				OSVersion: img.version, Architecture: arch, DiskSizeGB: 5})
			id++
		}
	}
	return c
}

func (c *Catalog) location(idOrName string) *Location {
	for i := range c.Locations {
		if l := &c.Locations[i]; l.Name == idOrName || fmt.Sprint(l.ID) == idOrName {
			return l
		}
	}
	return nil
}

func (c *Catalog) serverType(idOrName string) *ServerType {
	for i := range c.ServerTypes {
		if t := &c.ServerTypes[i]; t.Name == idOrName || fmt.Sprint(t.ID) == idOrName {
			return t
		}
	}
	return nil
}

// image finds an image by ID, or by name for an architecture (any architecture when arch
// is empty, x86 first).
func (c *Catalog) image(idOrName, arch string) *Image {
	var found *Image
	for i := range c.Images {
		img := &c.Images[i]
		switch {
		case fmt.Sprint(img.ID) == idOrName:
			return img
		case img.Name != "" && img.Name == idOrName && (arch == "" || img.Architecture == arch) && found == nil:
			found = img
		}
	}
	return found
}

// price is the type's price in a location; ok is false where the type is not offered.
func (t *ServerType) price(location string) (Price, bool) {
	for _, p := range t.Prices {
		if p.Location == location {
			return p, true
		}
	}
	return Price{}, false
}

// SetPrice sets a server type's net hourly price in a location (the monthly price follows at
// the same rate); false when the type has no price there.
func (s *StandIn) SetPrice(serverType, location string, hourly float64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.opts.Catalog.serverType(serverType)
	if t == nil {
		return false
	}
	for i := range t.Prices {
		if p := &t.Prices[i]; p.Location == location {
			if p.Hourly > 0 {
				p.Monthly *= hourly / p.Hourly
			}
			p.Hourly = hourly
			return true
		}
	}
	return false
}

// SetDeprecated deprecates a server type (or undoes it): /server_types shows its deprecation,
// announced now and unavailable after 90 days.
func (s *StandIn) SetDeprecated(serverType string, deprecated bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.opts.Catalog.serverType(serverType)
	if t == nil {
		return false
	}
	t.Deprecated = deprecated
	return true
}
