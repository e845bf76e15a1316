// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ConditionsFile, in a machine's state dir, holds node conditions the machine's kubelet
// reports instead of its own, as when its node really had the problem: a JSON list of
// {"type", "status", "reason", "message"}. A condition of a type the kubelet does not own
// (a node problem detector's) is reported next to its own. The kubelet reads the file on
// every heartbeat and reports a change at once; deleting the file ends the fault.
const ConditionsFile = "conditions.json"

// InjectConditions writes the conditions the machine of stateDir is to report (nil or empty:
// its own again).
func InjectConditions(stateDir string, conds []corev1.NodeCondition) error {
	path := filepath.Join(stateDir, ConditionsFile)
	if len(conds) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	data, err := json.Marshal(conds)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data)
}

// injected is what ConditionsFile holds, read again when its modification time changed.
type injected struct {
	mtime time.Time
	conds []corev1.NodeCondition
}

// refreshInjected reads ConditionsFile if it changed and reports whether it did.
func (m *machine) refreshInjected() bool {
	if m.cfg.StateDir == "" {
		return false
	}
	path := filepath.Join(m.cfg.StateDir, ConditionsFile)
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		changed := m.injected.conds != nil
		m.injected = injected{}
		return changed
	}
	if err != nil || info.ModTime().Equal(m.injected.mtime) {
		return false
	}
	data, err := os.ReadFile(path)
	var conds []corev1.NodeCondition
	if err == nil {
		err = json.Unmarshal(data, &conds)
	}
	if err == nil {
		for _, c := range conds {
			if c.Type == "" || (c.Status != corev1.ConditionTrue && c.Status != corev1.ConditionFalse && c.Status != corev1.ConditionUnknown) {
				err = fmt.Errorf("condition %q has status %q", c.Type, c.Status)
				break
			}
		}
	}
	if err != nil {
		m.log.printf("ignoring %s: %v", ConditionsFile, err)
		return false
	}
	m.injected = injected{mtime: info.ModTime(), conds: conds}
	m.log.printf("node conditions injected: %v", conditionStrings(conds))
	return true
}

// applyInjected puts the injected conditions in place of (or next to) the kubelet's own.
func (m *machine) applyInjected(want []corev1.NodeCondition) []corev1.NodeCondition {
	for _, c := range m.injected.conds {
		replaced := false
		for i := range want {
			if want[i].Type == c.Type {
				want[i] = c
				replaced = true
			}
		}
		if !replaced {
			want = append(want, c)
		}
	}
	return want
}

func conditionStrings(conds []corev1.NodeCondition) []string {
	out := make([]string, 0, len(conds))
	for _, c := range conds {
		out = append(out, string(c.Type)+"="+string(c.Status))
	}
	return out
}
