// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// Machine is the guest of a running VMI, as its hypervisor would start it.
type Machine struct {
	// VMI is the VMI's namespace and name; a VM's VMI has the VM's name.
	VMI types.NamespacedName
	// UserData is exactly the value of the cloud-init Secret's userdata (or userData) key.
	UserData []byte
	// Capacity is what the guest sees: cpu (its vCPUs), memory (the guest memory) and the
	// GPUs passed through to it.
	Capacity corev1.ResourceList
	// NeverJoin is a guest that boots but never joins.
	NeverJoin bool
	// PersistentDisk is a guest whose root disk outlives it (a DataVolume): a restarted VMI
	// boots from the same disk. A containerDisk is ephemeral.
	PersistentDisk bool
	// NodeImage is a guest whose image has the node software (GuestBootsNode); otherwise it
	// is a stock image.
	NodeImage bool
}

// Machines powers guests on and off.
type Machines interface {
	// PowerOn starts the guest; for a guest that runs already it does nothing.
	PowerOn(ctx context.Context, m Machine) error
	// PowerOff stops the guest of vmi, if it runs; with wipe its disk is gone too (an
	// ephemeral containerDisk, or a deleted VM's DataVolume).
	PowerOff(ctx context.Context, vmi types.NamespacedName, wipe bool) error
}

// SimMachines boots each guest as a simulated machine of internal/sim (a background
// `fulfiller sim` process) that reads the user data, joins with the bootstrap token in it and
// runs a simulated kubelet.
type SimMachines struct {
	// Dir holds one state directory per guest: <Dir>/<namespace>/<name>.
	Dir string
	// Binary is the `fulfiller sim` command line (see sim.Start); empty means this
	// executable followed by "sim".
	Binary []string
	// BootDelay and HeartbeatInterval are passed to each machine.
	BootDelay         time.Duration
	HeartbeatInterval time.Duration
	// StopGrace is how long a machine may take to power off before it is killed (default 10s).
	StopGrace time.Duration

	mu sync.Mutex
}

var _ Machines = (*SimMachines)(nil)

func (s *SimMachines) stateDir(vmi types.NamespacedName) string {
	return filepath.Join(s.Dir, vmi.Namespace, vmi.Name)
}

// PowerOn writes the user data to a 0600 file in the guest's state directory and starts the
// machine process.
func (s *SimMachines) PowerOn(_ context.Context, m Machine) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := s.stateDir(m.VMI)
	if _, running := sim.Running(dir); running {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("powering on %s: %w", m.VMI, err)
	}
	userData := filepath.Join(dir, "user-data")
	if err := os.WriteFile(userData, m.UserData, 0o600); err != nil {
		return fmt.Errorf("powering on %s: writing user data: %w", m.VMI, err)
	}
	cfg := sim.MachineConfig{
		Name:              m.VMI.Name,
		UserDataPath:      userData,
		Capacity:          m.Capacity,
		BootDelay:         s.BootDelay,
		HeartbeatInterval: s.HeartbeatInterval,
		NeverJoin:         m.NeverJoin,
		StateDir:          dir,
		Image:             sim.ImageStock,
	}
	if m.NodeImage {
		cfg.Image = sim.ImageNode
	}
	if err := sim.Start(cfg, s.Binary); err != nil {
		return fmt.Errorf("powering on %s: %w", m.VMI, err)
	}
	return nil
}

// PowerOff stops the machine process; with wipe its state directory (the disk, with the
// kubelet's client certificate) goes too.
func (s *SimMachines) PowerOff(_ context.Context, vmi types.NamespacedName, wipe bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	grace := s.StopGrace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	dir := s.stateDir(vmi)
	if err := sim.Stop(dir, grace); err != nil {
		return fmt.Errorf("powering off %s: %w", vmi, err)
	}
	if wipe {
		if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wiping the disk of %s: %w", vmi, err)
		}
	}
	return nil
}

// Running reports whether the guest of vmi runs.
func (s *SimMachines) Running(vmi types.NamespacedName) bool {
	_, ok := sim.Running(s.stateDir(vmi))
	return ok
}

// LogPath is the guest's machine log.
func (s *SimMachines) LogPath(vmi types.NamespacedName) string {
	return filepath.Join(s.stateDir(vmi), sim.LogFile)
}
