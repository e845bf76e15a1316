// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// SimMachines runs each server's machine as a simulated machine (internal/sim) in the
// background: it boots, runs the server's cloud-init from exactly its user data, reaches the
// stand-in's metadata service of its server at 169.254.169.254, joins with the bootstrap
// token in the user data and runs a simulated kubelet.
type SimMachines struct {
	// Dir holds each machine's state dir, Dir/<server-id>: its user data, disk and log.
	Dir string
	// Binary is the `fulfiller sim` command line that runs a machine (sim.Start's binary;
	// empty: this executable followed by "sim").
	Binary []string
	// BootDelay is how long a machine takes from power-on to cloud-init.
	BootDelay time.Duration
	// HeartbeatInterval of the simulated kubelets (0: the kubelet's default).
	HeartbeatInterval time.Duration
	// StopGrace is how long a machine may take to stop after SIGTERM (default 10s).
	StopGrace time.Duration
}

var _ Machines = (*SimMachines)(nil)

func (s *SimMachines) stateDir(id int64) string {
	return filepath.Join(s.Dir, strconv.FormatInt(id, 10))
}

// Capacity is what a simulated machine of a server type reports: its cores, memory and disk
// (GB taken as GiB) and 110 pods.
func Capacity(t ServerType) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(t.Cores), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(int64(t.MemoryGB*(1<<30)), resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(t.DiskGB)<<30, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(sim.DefaultPods, resource.DecimalSI),
	}
}

// Boot writes the server's user data onto the machine's disk (0600) and starts it.
func (s *SimMachines) Boot(m Machine) error {
	dir := s.stateDir(m.ServerID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the machine's state dir: %w", err)
	}
	userData := filepath.Join(dir, "user-data")
	if err := os.WriteFile(userData, m.UserData, 0o600); err != nil {
		return fmt.Errorf("writing the machine's user data: %w", err)
	}
	// Without a cloud-controller-manager (or --node-ip) a kubelet reports the address of the
	// interface with the default route: the public one, else the first private one.
	address := m.PublicIPv4
	if address == "" && len(m.PrivateIPs) > 0 {
		address = m.PrivateIPs[0]
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: m.Name}}
	if address != "" {
		addresses = append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: address}}, addresses...)
	}
	// A system image is a stock operating system; a snapshot has the node software (made with
	// images/hetzner-cloud, which runs bootstrap's install script on one).
	image, arch := sim.ImageStock, "amd64"
	if m.Image.Type == ImageSnapshot {
		image = sim.ImageNode
	}
	if m.Image.Architecture == "arm" {
		arch = "arm64"
	}
	return sim.Start(sim.MachineConfig{
		Image:             image,
		OS:                m.Image.OSFlavor + "-" + m.Image.OSVersion,
		Arch:              arch,
		Name:              m.Name,
		UserDataPath:      userData,
		Capacity:          Capacity(m.ServerType),
		BootDelay:         s.BootDelay,
		HeartbeatInterval: s.HeartbeatInterval,
		StateDir:          dir,
		Addresses:         addresses,
		MetadataURL:       m.MetadataURL,
	}, s.Binary)
}

func (s *SimMachines) grace() time.Duration {
	if s.StopGrace > 0 {
		return s.StopGrace
	}
	return sim.DefaultStopGrace
}

// PowerOff stops the machine; its disk stays for the next Boot.
func (s *SimMachines) PowerOff(id int64) error {
	return sim.Stop(s.stateDir(id), s.grace())
}

// Remove stops the machine and deletes its state dir.
func (s *SimMachines) Remove(id int64) error {
	if err := sim.Stop(s.stateDir(id), s.grace()); err != nil {
		return err
	}
	return os.RemoveAll(s.stateDir(id))
}
