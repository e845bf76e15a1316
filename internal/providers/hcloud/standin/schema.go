// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"fmt"
	"strconv"
	"time"
)

// The JSON shapes of the Hetzner Cloud API (docs.hetzner.cloud), as far as the stand-in
// serves them. Nullable fields are pointers; lists are never null.

// apiTime is a timestamp as the API writes it: RFC 3339 with a numeric offset.
type apiTime time.Time

func (t apiTime) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Time(t).UTC().Format("2006-01-02T15:04:05-07:00"))), nil
}

type jsonPagination struct {
	Page         int  `json:"page"`
	PerPage      int  `json:"per_page"`
	PreviousPage *int `json:"previous_page"`
	NextPage     *int `json:"next_page"`
	LastPage     *int `json:"last_page"`
	TotalEntries *int `json:"total_entries"`
}

type jsonMeta struct {
	Pagination jsonPagination `json:"pagination"`
}

type jsonError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details"`
}

type jsonActionError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type jsonResourceRef struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
}

type jsonAction struct {
	ID        int64             `json:"id"`
	Command   string            `json:"command"`
	Status    string            `json:"status"`
	Progress  int               `json:"progress"`
	Started   apiTime           `json:"started"`
	Finished  *apiTime          `json:"finished"`
	Resources []jsonResourceRef `json:"resources"`
	Error     *jsonActionError  `json:"error"`
}

type jsonPrice struct {
	Net   string `json:"net"`
	Gross string `json:"gross"`
}

func newPrice(net float64) jsonPrice {
	return jsonPrice{Net: fmt.Sprintf("%.10f", net), Gross: fmt.Sprintf("%.16f", net*(1+VATRate))}
}

type jsonLocation struct {
	ID          int64   `json:"id"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Country     string  `json:"country"`
	City        string  `json:"city"`
	Latitude    float64 `json:"latitude"`
	Longitude   float64 `json:"longitude"`
	NetworkZone string  `json:"network_zone"`
}

func locationJSON(l *Location) jsonLocation {
	return jsonLocation{ID: l.ID, Name: l.Name, Description: l.Description, Country: l.Country, City: l.City,
		Latitude: l.Latitude, Longitude: l.Longitude, NetworkZone: l.NetworkZone}
}

type jsonServerTypePrice struct {
	Location          string    `json:"location"`
	PriceHourly       jsonPrice `json:"price_hourly"`
	PriceMonthly      jsonPrice `json:"price_monthly"`
	IncludedTraffic   int64     `json:"included_traffic"`
	PricePerTBTraffic jsonPrice `json:"price_per_tb_traffic"`
}

type jsonServerTypeLocation struct {
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	Deprecation any    `json:"deprecation"`
	Available   bool   `json:"available"`
	Recommended bool   `json:"recommended"`
}

type jsonServerType struct {
	ID              int64                    `json:"id"`
	Name            string                   `json:"name"`
	Description     string                   `json:"description"`
	Category        string                   `json:"category"`
	Cores           int                      `json:"cores"`
	Memory          float64                  `json:"memory"`
	Disk            int                      `json:"disk"`
	Deprecated      bool                     `json:"deprecated"`
	Deprecation     any                      `json:"deprecation"`
	Prices          []jsonServerTypePrice    `json:"prices"`
	StorageType     string                   `json:"storage_type"`
	CPUType         string                   `json:"cpu_type"`
	Architecture    string                   `json:"architecture"`
	IncludedTraffic int64                    `json:"included_traffic"`
	Locations       []jsonServerTypeLocation `json:"locations"`
}

const terabyte = 1 << 40

func serverTypePrices(t *ServerType) []jsonServerTypePrice {
	out := make([]jsonServerTypePrice, 0, len(t.Prices))
	for _, p := range t.Prices {
		out = append(out, jsonServerTypePrice{
			Location: p.Location, PriceHourly: newPrice(p.Hourly), PriceMonthly: newPrice(p.Monthly),
			IncludedTraffic: int64(p.IncludedTrafficTB) * terabyte, PricePerTBTraffic: newPrice(1),
		})
	}
	return out
}

type jsonImage struct {
	ID           int64             `json:"id"`
	Type         string            `json:"type"`
	Status       string            `json:"status"`
	Name         *string           `json:"name"`
	Description  string            `json:"description"`
	ImageSize    *float64          `json:"image_size"`
	DiskSize     float64           `json:"disk_size"`
	Created      apiTime           `json:"created"`
	CreatedFrom  any               `json:"created_from"`
	BoundTo      *int64            `json:"bound_to"`
	OSFlavor     string            `json:"os_flavor"`
	OSVersion    *string           `json:"os_version"`
	RapidDeploy  bool              `json:"rapid_deploy"`
	Protection   jsonProtection    `json:"protection"`
	Deprecated   *apiTime          `json:"deprecated"`
	Deprecation  any               `json:"deprecation"`
	Deleted      *apiTime          `json:"deleted"`
	Labels       map[string]string `json:"labels"`
	Architecture string            `json:"architecture"`
}

type jsonProtection struct {
	Delete bool `json:"delete"`
}

func imageJSON(img *Image) jsonImage {
	version := img.OSVersion
	j := jsonImage{ID: img.ID, Type: img.imageType(), Status: "available", Description: img.Description,
		DiskSize: img.DiskSizeGB, Created: apiTime(catalogCreated), OSFlavor: img.OSFlavor, OSVersion: &version,
		RapidDeploy: true, Labels: map[string]string{}, Architecture: img.Architecture}
	if img.Type != ImageSnapshot {
		name := img.Name
		j.Name = &name
		return j
	}
	// A snapshot has no name (only system images do), its own size and creation time, and
	// its labels; it is not rapid-deployed.
	size := img.DiskSizeGB / 4
	j.ImageSize, j.RapidDeploy = &size, false
	if !img.Created.IsZero() {
		j.Created = apiTime(img.Created)
	}
	for k, v := range img.Labels {
		j.Labels[k] = v
	}
	return j
}

type jsonServerPublicNetIPv4 struct {
	ID      int64  `json:"id"`
	IP      string `json:"ip"`
	Blocked bool   `json:"blocked"`
	DNSPtr  string `json:"dns_ptr"`
}

type jsonDNSPtr struct {
	IP     string `json:"ip"`
	DNSPtr string `json:"dns_ptr"`
}

type jsonServerPublicNetIPv6 struct {
	ID      int64        `json:"id"`
	IP      string       `json:"ip"`
	Blocked bool         `json:"blocked"`
	DNSPtr  []jsonDNSPtr `json:"dns_ptr"`
}

type jsonServerFirewall struct {
	ID     int64  `json:"id"`
	Status string `json:"status"`
}

type jsonServerPublicNet struct {
	IPv4        *jsonServerPublicNetIPv4 `json:"ipv4"`
	IPv6        *jsonServerPublicNetIPv6 `json:"ipv6"`
	FloatingIPs []int64                  `json:"floating_ips"`
	Firewalls   []jsonServerFirewall     `json:"firewalls"`
}

type jsonServerPrivateNet struct {
	Network    int64    `json:"network"`
	IP         string   `json:"ip"`
	AliasIPs   []string `json:"alias_ips"`
	MACAddress string   `json:"mac_address"`
}

type jsonServerProtection struct {
	Delete  bool `json:"delete"`
	Rebuild bool `json:"rebuild"`
}

type jsonPlacementGroup struct {
	ID      int64             `json:"id"`
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels"`
	Type    string            `json:"type"`
	Created apiTime           `json:"created"`
	Servers []int64           `json:"servers"`
}

type jsonServer struct {
	ID              int64                  `json:"id"`
	Name            string                 `json:"name"`
	Status          string                 `json:"status"`
	Created         apiTime                `json:"created"`
	PublicNet       jsonServerPublicNet    `json:"public_net"`
	PrivateNet      []jsonServerPrivateNet `json:"private_net"`
	ServerType      jsonServerType         `json:"server_type"`
	Location        jsonLocation           `json:"location"`
	Image           *jsonImage             `json:"image"`
	ISO             any                    `json:"iso"`
	RescueEnabled   bool                   `json:"rescue_enabled"`
	Locked          bool                   `json:"locked"`
	BackupWindow    *string                `json:"backup_window"`
	OutgoingTraffic *int64                 `json:"outgoing_traffic"`
	IngoingTraffic  *int64                 `json:"ingoing_traffic"`
	IncludedTraffic int64                  `json:"included_traffic"`
	Protection      jsonServerProtection   `json:"protection"`
	Labels          map[string]string      `json:"labels"`
	Volumes         []int64                `json:"volumes"`
	LoadBalancers   []int64                `json:"load_balancers"`
	PrimaryDiskSize int                    `json:"primary_disk_size"`
	PlacementGroup  *jsonPlacementGroup    `json:"placement_group"`
}

type jsonSubnet struct {
	Type        string `json:"type"`
	IPRange     string `json:"ip_range"`
	NetworkZone string `json:"network_zone"`
	Gateway     string `json:"gateway"`
	VSwitchID   *int64 `json:"vswitch_id,omitempty"`
}

type jsonNetwork struct {
	ID                    int64             `json:"id"`
	Name                  string            `json:"name"`
	IPRange               string            `json:"ip_range"`
	Subnets               []jsonSubnet      `json:"subnets"`
	Routes                []any             `json:"routes"`
	Servers               []int64           `json:"servers"`
	LoadBalancers         []int64           `json:"load_balancers"`
	Protection            jsonProtection    `json:"protection"`
	Labels                map[string]string `json:"labels"`
	Created               apiTime           `json:"created"`
	ExposeRoutesToVSwitch bool              `json:"expose_routes_to_vswitch"`
}

type jsonFirewallResource struct {
	Type          string          `json:"type"`
	Server        *jsonResourceID `json:"server,omitempty"`
	LabelSelector *struct {
		Selector string `json:"selector"`
	} `json:"label_selector,omitempty"`
}

type jsonResourceID struct {
	ID int64 `json:"id"`
}

type jsonFirewallRule struct {
	Direction      string   `json:"direction"`
	Protocol       string   `json:"protocol"`
	Port           *string  `json:"port"`
	SourceIPs      []string `json:"source_ips"`
	DestinationIPs []string `json:"destination_ips"`
	Description    *string  `json:"description"`
}

type jsonFirewall struct {
	ID        int64                  `json:"id"`
	Name      string                 `json:"name"`
	Labels    map[string]string      `json:"labels"`
	Created   apiTime                `json:"created"`
	Rules     []jsonFirewallRule     `json:"rules"`
	AppliedTo []jsonFirewallResource `json:"applied_to"`
}

type jsonSSHKey struct {
	ID          int64             `json:"id"`
	Name        string            `json:"name"`
	Fingerprint string            `json:"fingerprint"`
	PublicKey   string            `json:"public_key"`
	Labels      map[string]string `json:"labels"`
	Created     apiTime           `json:"created"`
}
