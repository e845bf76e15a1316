// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package rules holds the error rules of every node-type family the fulfiller knows, by
// family name, for the runner binary (cmd/fulfiller-runner). Each family's rules live in a
// package of their own that links no Kubernetes client, so that a runner starts in a few
// milliseconds of CPU; the families (internal/providers) give the controller the same rules,
// which TestRunnerRulesAreTheFamilies checks.
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
