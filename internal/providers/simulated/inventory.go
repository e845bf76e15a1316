// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package simulated

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// LabelsFile is where modules/sim keeps a machine's labels, in its state dir
// (<sim_dir>/<node name>): the simulated cloud's labels.
const LabelsFile = "labels.json"

// stopTimeout bounds stopping one machine.
const stopTimeout = time.Minute

// simDir is the folder under which the class's machines keep their state dirs (its
// sim_dir variable).
func simDir(s family.Scope) (string, error) {
	if s.Class == nil || !filepath.IsAbs(s.Class.Spec.Variables["sim_dir"]) {
		return "", errors.New("the class has no absolute sim_dir variable")
	}
	return filepath.Clean(s.Class.Spec.Variables["sim_dir"]), nil
}

// List returns the simulated machines under the class's sim_dir whose labels carry this
// cluster's name, attributed by their labels; Created is when their labels were written (the
// machine's power-on). Without a cluster name it lists nothing.
func (f *Family) List(_ context.Context, s family.Scope) ([]family.Machine, error) {
	if s.Cluster == "" {
		return nil, nil
	}
	dir, err := simDir(s)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing simulated machines: %w", err)
	}
	var out []family.Machine
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		m, ok, err := readMachine(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if ok && m.Cluster == s.Cluster {
			out = append(out, m)
		}
	}
	return out, nil
}

// readMachine reads a state dir's labels; false when it has none (not a machine of modules/sim
// with labels).
func readMachine(stateDir string) (family.Machine, bool, error) {
	path := filepath.Join(stateDir, LabelsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return family.Machine{}, false, nil
	}
	if err != nil {
		return family.Machine{}, false, fmt.Errorf("reading %s: %w", path, err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return family.Machine{}, false, fmt.Errorf("reading %s: %w", path, err)
	}
	var labels map[string]string
	if err := json.Unmarshal(data, &labels); err != nil {
		return family.Machine{}, false, nil // not labels this family wrote: not attributable
	}
	name := filepath.Base(stateDir)
	return family.Machine{ID: name, Name: name, ProviderID: "sim://" + name, Cluster: labels[keys.LabelCluster],
		Claim: labels[keys.LabelNodeClaim], Class: labels[keys.LabelNodeClass], NodePool: labels[keys.LabelNodePool],
		Created: info.ModTime()}, true, nil
}

// Delete powers a machine off, as its module's destroy does (`fulfiller-dev sim stop`, this
// process's own binary), and removes its state dir, after reading its labels again: only
// while they still carry this cluster's name and the claim it was listed with.
func (f *Family) Delete(ctx context.Context, s family.Scope, m family.Machine) error {
	dir, err := simDir(s)
	if err != nil {
		return err
	}
	stateDir := filepath.Join(dir, m.ID)
	if filepath.Dir(stateDir) != dir || m.ID == "" {
		return fmt.Errorf("machine id %q is no folder of %s", m.ID, dir)
	}
	now, ok, err := readMachine(stateDir)
	if err != nil || !ok {
		return err
	}
	if s.Cluster == "" || now.Cluster != s.Cluster || now.Claim != m.Claim {
		return fmt.Errorf("simulated machine %s is no longer labelled as cluster %s's claim %s: not deleted", m.Name, s.Cluster, m.Claim)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the fulfiller-dev binary: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, self, "sim", "stop", "--state-dir", stateDir).CombinedOutput(); err != nil {
		return fmt.Errorf("stopping simulated machine %s (needs the fulfiller-dev binary): %w: %s", m.Name, err, out)
	}
	if err := os.RemoveAll(stateDir); err != nil {
		return fmt.Errorf("removing simulated machine %s: %w", m.Name, err)
	}
	return nil
}
