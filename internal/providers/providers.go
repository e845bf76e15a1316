// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package providers assembles the node-type families the fulfiller binaries know.
package providers

import (
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud"
	"github.com/fulfiller-sh/fulfiller/internal/providers/kubevirt"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/simulated"
)

// Families returns a registry of every family: the simulated type, Hetzner Cloud, KubeVirt
// and Hetzner Robot. Each binary builds it once and hands it to the controller and the runner.
func Families() family.Registry {
	r, err := family.NewRegistry(simulated.NewFamily(), hcloud.NewFamily(), kubevirt.NewFamily(), robot.NewFamily())
	if err != nil {
		panic(err) // the names are constants: a duplicate is a programming error
	}
	return r
}
