// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
)

// Server is a dedicated server of the account (GET /server/{server-number}).
type Server struct {
	IP      string   `json:"server_ip"`
	IPv6Net string   `json:"server_ipv6_net"`
	Number  int      `json:"server_number"`
	Name    string   `json:"server_name"`
	Product string   `json:"product"`
	DC      string   `json:"dc"`
	Status  string   `json:"status"` // "ready" or "in process"
	IPs     []string `json:"ip"`
	// Cancelled servers are being returned to Hetzner.
	Cancelled bool   `json:"cancelled"`
	PaidUntil string `json:"paid_until"`
	// Reset and Rescue say whether the server has these options (GET /server/{n} only).
	Reset  bool `json:"reset"`
	Rescue bool `json:"rescue"`
}

// ListServers returns every server of the account; an account without servers (the
// webservice answers SERVER_NOT_FOUND) has none.
func (c *Client) ListServers(ctx context.Context) ([]Server, error) {
	var out []struct {
		Server Server `json:"server"`
	}
	if err := c.do(ctx, EndpointServers, "GET", "/server", nil, &out); err != nil {
		if errors.Is(err, ErrServerNotFound) {
			return nil, nil
		}
		return nil, err
	}
	servers := make([]Server, 0, len(out))
	for _, s := range out {
		servers = append(servers, s.Server)
	}
	return servers, nil
}

// GetServer returns server number n; an unknown number is ErrServerNotFound.
func (c *Client) GetServer(ctx context.Context, n int) (*Server, error) {
	var out struct {
		Server Server `json:"server"`
	}
	if err := c.do(ctx, EndpointServer, "GET", serverPath("/server/", n, ""), nil, &out); err != nil {
		return nil, err
	}
	return &out.Server, nil
}

// Rescue is a server's rescue boot configuration. The webservice lists the available
// operating systems while it is inactive and names the chosen one while it is active.
type Rescue struct {
	ServerIP      string          `json:"server_ip"`
	ServerNumber  int             `json:"server_number"`
	OS            stringOrList    `json:"os"`
	Active        bool            `json:"active"`
	Password      *string         `json:"password"`
	AuthorizedKey []authorizedKey `json:"authorized_key"`
	// HostKey is what the webservice reports of the rescue system's host keys; its element
	// format is not documented.
	HostKey []json.RawMessage `json:"host_key"`
}

type authorizedKey struct {
	Key Key `json:"key"`
}

// AuthorizedKeys are the fingerprints of the keys the rescue system lets in.
func (r *Rescue) AuthorizedKeys() []string {
	fps := make([]string, 0, len(r.AuthorizedKey))
	for _, k := range r.AuthorizedKey {
		fps = append(fps, k.Key.Fingerprint)
	}
	return fps
}

// stringOrList is a value the webservice sends as a string or a list of strings.
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return fmt.Errorf("expected a string or a list of strings: %w", err)
	}
	*s = many
	return nil
}

// GetRescue returns server n's rescue configuration.
func (c *Client) GetRescue(ctx context.Context, n int) (*Rescue, error) {
	return c.rescue(ctx, EndpointRescue, "GET", serverPath("/boot/", n, "/rescue"), nil)
}

// LastRescue returns the data of server n's last rescue activation.
func (c *Client) LastRescue(ctx context.Context, n int) (*Rescue, error) {
	return c.rescue(ctx, EndpointRescueLast, "GET", serverPath("/boot/", n, "/rescue/last"), nil)
}

// ActivateRescue arms the rescue system of server n for its next boot, letting in the SSH
// keys with the given fingerprints (keys of the account, see CreateKey).
func (c *Client) ActivateRescue(ctx context.Context, n int, os string, fingerprints []string) (*Rescue, error) {
	form := url.Values{"os": {os}}
	for _, fp := range fingerprints {
		form.Add("authorized_key[]", fp)
	}
	return c.rescue(ctx, EndpointRescueOn, "POST", serverPath("/boot/", n, "/rescue"), form)
}

// DeactivateRescue disarms the rescue system of server n.
func (c *Client) DeactivateRescue(ctx context.Context, n int) (*Rescue, error) {
	return c.rescue(ctx, EndpointRescueOff, "DELETE", serverPath("/boot/", n, "/rescue"), nil)
}

func (c *Client) rescue(ctx context.Context, endpoint, method, path string, form url.Values) (*Rescue, error) {
	var out struct {
		Rescue Rescue `json:"rescue"`
	}
	if err := c.do(ctx, endpoint, method, path, form, &out); err != nil {
		return nil, err
	}
	return &out.Rescue, nil
}

// ResetType is how a server is reset.
type ResetType string

const (
	ResetSoftware  ResetType = "sw"    // Ctrl+Alt+Del
	ResetHardware  ResetType = "hw"    // the reset button: power is cycled
	ResetPower     ResetType = "power" // the power button: ACPI shutdown signal
	ResetPowerLong ResetType = "power_long"
	ResetManual    ResetType = "man" // a technician does it
)

// ResetOptions are the reset types server n offers and its operating status.
type ResetOptions struct {
	ServerNumber    int          `json:"server_number"`
	Types           stringOrList `json:"type"`
	OperatingStatus string       `json:"operating_status"`
}

// GetResetOptions returns the reset types server n offers.
func (c *Client) GetResetOptions(ctx context.Context, n int) (*ResetOptions, error) {
	var out struct {
		Reset ResetOptions `json:"reset"`
	}
	if err := c.do(ctx, EndpointResetOptions, "GET", serverPath("/reset/", n, ""), nil, &out); err != nil {
		return nil, err
	}
	return &out.Reset, nil
}

// Reset resets server n. Its budget is the smallest of all (50 per hour).
func (c *Client) Reset(ctx context.Context, n int, t ResetType) error {
	return c.do(ctx, EndpointReset, "POST", serverPath("/reset/", n, ""), url.Values{"type": {string(t)}}, nil)
}

// Key is an SSH public key of the account.
type Key struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
	Type        string `json:"type"`
	Size        int    `json:"size"`
	Data        string `json:"data"`
}

// ListKeys returns the account's SSH keys; an account without keys (NOT_FOUND) has none.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out []struct {
		Key Key `json:"key"`
	}
	if err := c.do(ctx, EndpointKeys, "GET", "/key", nil, &out); err != nil {
		if IsCode(err, CodeNotFound) {
			return nil, nil
		}
		return nil, err
	}
	keys := make([]Key, 0, len(out))
	for _, k := range out {
		keys = append(keys, k.Key)
	}
	return keys, nil
}

// GetKey returns the key with the given (MD5, colon-separated) fingerprint; an unknown one
// is an *APIError with code NOT_FOUND.
func (c *Client) GetKey(ctx context.Context, fingerprint string) (*Key, error) {
	var out struct {
		Key Key `json:"key"`
	}
	if err := c.do(ctx, EndpointKey, "GET", "/key/"+url.PathEscape(fingerprint), nil, &out); err != nil {
		return nil, err
	}
	return &out.Key, nil
}

// CreateKey adds an SSH public key (OpenSSH format) to the account.
func (c *Client) CreateKey(ctx context.Context, name, data string) (*Key, error) {
	var out struct {
		Key Key `json:"key"`
	}
	if err := c.do(ctx, EndpointKeyCreate, "POST", "/key", url.Values{"name": {name}, "data": {data}}, &out); err != nil {
		return nil, err
	}
	return &out.Key, nil
}

// DeleteKey removes a key from the account.
func (c *Client) DeleteKey(ctx context.Context, fingerprint string) error {
	return c.do(ctx, EndpointKeyDelete, "DELETE", "/key/"+url.PathEscape(fingerprint), nil, nil)
}
