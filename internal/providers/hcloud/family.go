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
	_ family.Family    = (*Family)(nil)
	_ family.Catalogue = (*Family)(nil)
	_ family.Machines  = (*Family)(nil)
	_ family.Billing   = (*Family)(nil)
)

// NewFamily returns the Hetzner Cloud family.
func NewFamily() *Family { return &Family{} }

func (*Family) Name() string { return v1alpha1.FamilyHcloud }

// BillingPeriod: Hetzner Cloud bills a server by each started hour.
func (*Family) BillingPeriod() time.Duration { return time.Hour }
