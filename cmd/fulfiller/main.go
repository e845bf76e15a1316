// Command fulfiller is the one binary of the project: the controller, the tofu runner, the
// simulated machine and the local environment.
package main

import (
	"fmt"
	"os"

	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/operator"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: fulfiller <command> [flags]

commands:
  controller   run Karpenter core with the fulfiller provider and controllers
  run          run one tofu operation for one claim (the runner)
  sim          start, run or stop a simulated machine
  dev          start (up) or stop (down) the local environment, or run the demo
  version      print the version
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	switch cmd {
	case "controller":
		os.Args = append([]string{os.Args[0]}, args...) // Karpenter parses os.Args itself
		operator.Run()
	case "run":
		os.Exit(tfrunner.Main(args))
	case "sim":
		os.Exit(sim.Main(args))
	case "dev":
		os.Exit(devenv.Main(args))
	case "version":
		fmt.Println(version)
	default:
		fmt.Fprintf(os.Stderr, "fulfiller: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
}
