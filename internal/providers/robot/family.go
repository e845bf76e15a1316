// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"sync"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Family is the Hetzner Robot node-type family (spec.family: robot). Its pool is a finite
// catalogue: the class's servers (spec.robot), each leased to one claim at a time.
type Family struct {
	// Now is the clock (default time.Now); NewMachines builds a class's Machines (default
	// ActivatorMachines). Tests set them.
	Now         func() time.Time
	NewMachines func(family.Scope) (Machines, error)

	once   sync.Once
	keeper *keeperState
}

var (
	_ family.Family             = (*Family)(nil)
	_ family.Pool               = (*Family)(nil)
	_ family.CredentialsChecker = (*Family)(nil)
	_ family.Billing            = (*Family)(nil)
)

// NewFamily returns the Hetzner Robot family.
func NewFamily() *Family { return &Family{} }

func (*Family) Name() string { return v1alpha1.FamilyRobot }

// BillingPeriod: Hetzner bills a dedicated server by the month, here the mean month of 730
// hours (a year's 8760 over 12).
func (*Family) BillingPeriod() time.Duration { return 730 * time.Hour }
