// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Family is the KubeVirt node-type family (spec.family: kubevirt): its error rules, its
// class checks, a watcher of each claim's VM and the inventory of this cluster's VMs, all
// read on the infra cluster with the class's credentials.
type Family struct {
	infra infraClients
}

var (
	_ family.Family         = (*Family)(nil)
	_ family.MachineWatcher = (*Family)(nil)
	_ family.Machines       = (*Family)(nil)
	_ family.ClassChecker   = (*Family)(nil)
)

// NewFamily returns the KubeVirt family.
func NewFamily() *Family { return &Family{} }

func (*Family) Name() string { return v1alpha1.FamilyKubeVirt }
