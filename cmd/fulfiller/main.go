// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Command fulfiller is the binary the image ships: the controller (Karpenter core with the
// fulfiller inside) and the tofu runner of each run. It links no test machinery; the local
// environment and the simulated machine are in cmd/fulfiller-dev.
package main

import (
	"github.com/fulfiller-sh/fulfiller/internal/cli"
	"github.com/fulfiller-sh/fulfiller/internal/providers"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	cli.Main("fulfiller", version, providers.Families())
}
