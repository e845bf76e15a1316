// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Command fulfiller-runner is the runner alone: `fulfiller-runner <flags>` does what
// `fulfiller run <flags>` does, one tofu operation for one claim, with the error rules of
// every family. It links no Kubernetes client, so it starts in about a tenth of the CPU the
// controller's binary needs; the local executor starts it when it lies next to the binary
// that runs the controller (make build puts it in bin/).
package main

import (
	"os"

	"github.com/fulfiller-sh/fulfiller/internal/providers/rules"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

func main() {
	os.Exit(tfrunner.Main(os.Args[1:], rules.Set()))
}
