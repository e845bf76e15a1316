// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Family is the Hetzner Cloud node-type family (spec.family: hcloud).
type Family struct{}

var (
	_ family.Family     = (*Family)(nil)
	_ family.ErrorRules = (*Family)(nil)
	_ family.Catalogue  = (*Family)(nil)
	_ family.Inventory  = (*Family)(nil)
)

// NewFamily returns the Hetzner Cloud family.
func NewFamily() *Family { return &Family{} }

func (*Family) Name() string { return v1alpha1.FamilyHcloud }

// ErrorRules classify the Hetzner Cloud API's error codes and the provider's phrases.
func (*Family) ErrorRules() tfrunner.Rules { return hcloudrules.Rules{} }
