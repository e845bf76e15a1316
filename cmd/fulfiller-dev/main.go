// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Command fulfiller-dev is the development binary: everything cmd/fulfiller does, plus the
// local environment (`dev`) and the simulated machine (`sim`), so that the environment runs
// its controller, its runners and its machines from this one executable (the runner exports
// it as FULFILLER_BINARY, which modules/sim calls with `sim start`). It is not shipped.
package main

import (
	"github.com/fulfiller-sh/fulfiller/internal/cli"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/providers"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	cli.Main("fulfiller-dev", version, providers.Families(),
		cli.Command{Name: "sim", Summary: "start, run or stop a simulated machine", Run: sim.Main},
		cli.Command{Name: "dev", Summary: "start (up) or stop (down) the local environment, or run the demo", Run: devenv.Main},
	)
}
