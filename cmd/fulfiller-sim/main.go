// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Command fulfiller-sim is the simulated machine alone: `fulfiller-sim <command>` does what
// `fulfiller-dev sim <command>` does (start, run, stop). It links neither Karpenter nor the
// controller, so a machine starts in about half the CPU of the development binary. modules/sim
// and the stand-ins start it when it lies next to the development binary (make build puts
// both in bin/).
package main

import (
	"os"

	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

func main() {
	os.Exit(sim.Main(os.Args[1:]))
}
