// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Family is the Hetzner Cloud node-type family (spec.family: hcloud).
type Family struct{}

var (
	_ family.Family     = (*Family)(nil)
	_ family.Catalogue  = (*Family)(nil)
	_ family.Machines   = (*Family)(nil)
	_ family.Billing    = (*Family)(nil)
	_ family.ZoneLabels = (*Family)(nil)
)

// LocationLabel is the topology key of the Hetzner Cloud CSI driver: a volume's
// PersistentVolume pins the location it lives in with it (node affinity), and the driver's
// node plugin labels each Node with its server's location.
const LocationLabel = "csi.hetzner.cloud/location"

// NewFamily returns the Hetzner Cloud family.
func NewFamily() *Family { return &Family{} }

func (*Family) Name() string { return v1alpha1.FamilyHcloud }

// ZoneLabels: the family's zones are Hetzner Cloud locations (fsn1, nbg1, ...), which the CSI
// driver's volumes name by LocationLabel.
func (*Family) ZoneLabels() []string { return []string{LocationLabel} }

// BillingPeriod: Hetzner Cloud bills a server by each started hour.
func (*Family) BillingPeriod() time.Duration { return time.Hour }
