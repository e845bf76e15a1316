// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

// Machines runs the machines of the stand-in's servers, e.g. simulated machines
// (SimMachines). Its methods may be called concurrently for different servers.
type Machines interface {
	// Boot powers on the machine of a server that has started (after its creation, or a
	// power-on). It returns once the machine runs; booting and cloud-init happen after.
	Boot(m Machine) error
	// PowerOff turns the machine off (power off, shutdown); its disk stays, and a later Boot
	// starts it again from that disk.
	PowerOff(serverID int64) error
	// Remove turns the machine off for good and frees its disk: the server was deleted.
	Remove(serverID int64) error
}

// Machine is what a server's machine is made of.
type Machine struct {
	ServerID int64
	// Name is the server's name, the machine's hostname.
	Name       string
	ServerType ServerType
	Location   string
	// UserData is the server's user data exactly as it was created with.
	UserData []byte
	// MetadataURL stands for http://169.254.169.254 on this machine's network: a request of
	// the machine to http://169.254.169.254/<path> goes to MetadataURL/<path>.
	MetadataURL string
	// PublicIPv4 and PublicIPv6 are the server's public addresses ("" when disabled;
	// PublicIPv6 is the first address of its /64); PrivateIPs its private network addresses.
	PublicIPv4, PublicIPv6 string
	PrivateIPs             []string
	// Image is what the server was created from: a system image, or a snapshot.
	Image Image
}
