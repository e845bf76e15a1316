// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package simulated is the node-type family of modules/sim (spec.family: sim), the simulated
// type of the tests, the local environment and the chart's smoke test of the image. Its
// machines are simulated ones (`fulfiller-dev sim`, internal/sim); this package holds only
// what the controller needs to know about them and links none of the simulation, so the
// controller binary may carry it.
package simulated

import (
	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// Family is the simulated node-type family.
type Family struct{}

var (
	_ family.Family   = (*Family)(nil)
	_ family.Machines = (*Family)(nil)
)

// NewFamily returns the simulated family.
func NewFamily() *Family { return &Family{} }

func (*Family) Name() string { return v1alpha1.FamilySim }
