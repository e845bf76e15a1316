// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package rules is the one registry of the node-type families' error rules, by family name,
// for every runner (cmd/fulfiller-runner and `fulfiller run`). Each family's rules live in a
// package of their own that links no Kubernetes client, so that a runner starts in a few
// milliseconds of CPU; TestEveryFamilyHasRules checks that every family the binaries know
// (internal/providers) is listed.
package rules

import (
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt/kubevirtrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Set returns the rules of each family by its name (spec.family): the simulated type fails
// with the Hetzner Cloud API's codes, as its family says.
func Set() tfrunner.RuleSet {
	return tfrunner.RuleSet{
		"sim":      hcloudrules.Rules{},
		"hcloud":   hcloudrules.Rules{},
		"kubevirt": kubevirtrules.Rules{},
		"robot":    robotrules.Rules{},
	}
}
