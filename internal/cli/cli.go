// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package cli dispatches the subcommands of the project's two binaries: cmd/fulfiller, what
// the image ships (controller, run, module, logs, robot, version), and cmd/fulfiller-dev, the development binary
// (the same commands plus the local environment and the simulated machine). It holds no
// command's logic, and imports nothing a controller binary must not link.
package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fulfiller-sh/fulfiller/internal/claimlogs"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/operator"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/rules"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Command is one subcommand of a binary.
type Command struct {
	Name string
	// Summary is its line in the binary's usage.
	Summary string
	// Run gets the arguments that follow the command's name and returns the exit code.
	Run func(args []string) int
}

// Main runs the command that os.Args[1] names and exits with its code. The commands are
// controller, run, module, logs, robot, then extra, then version; binary names the program in usage
// messages. families are the node-type families the binary knows, for the controller; the
// runner classifies failures with their error rules (internal/providers/rules).
func Main(binary, version string, families family.Registry, extra ...Command) {
	os.Exit(dispatch(binary, commands(version, families, extra), os.Args[1:], os.Stdout, os.Stderr))
}

// commands are the commands every binary has, with extra before version.
func commands(binaryVersion string, families family.Registry, extra []Command) []Command {
	cmds := []Command{
		{Name: "controller", Summary: "run Karpenter core with the fulfiller provider and controllers", Run: func(args []string) int {
			return controller(args, families)
		}},
		{Name: "run", Summary: "run one tofu operation for one claim (the runner)", Run: func(args []string) int {
			return tfrunner.Main(args, rules.Set())
		}},
		{Name: "module", Summary: "check a node-type module against the module contract (module check DIR|SOURCE)", Run: func(args []string) int {
			return tfrunner.ModuleMain(args, os.Stdout, os.Stderr)
		}},
		{Name: "logs", Summary: "print the log of a claim's tofu run: its runner's while it lasts, else the tail its Fulfillment kept (logs CLAIM)", Run: func(args []string) int {
			return claimlogs.Main(args, os.Stdout, os.Stderr)
		}},
		{Name: "robot", Summary: "activate, release or probe a leased Hetzner Robot server (modules/hetzner-robot)", Run: robot.Main},
	}
	cmds = append(cmds, extra...)
	return append(cmds, Command{Name: "version", Summary: "print the versions of the fulfiller, Karpenter core, tofu and the mirrored providers (-json)", Run: func(args []string) int {
		return version(binaryVersion, args, os.Stdout, os.Stderr)
	}})
}

// controller runs the operator, which parses the process's flags itself (Karpenter's options
// read os.Args), so the command's arguments become os.Args.
func controller(args []string, families family.Registry) int {
	os.Args = append([]string{os.Args[0]}, args...)
	operator.Run(families)
	return 0
}

func dispatch(binary string, cmds []Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage(binary, cmds))
		return 2
	}
	for _, c := range cmds {
		if c.Name == args[0] {
			return c.Run(args[1:])
		}
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage(binary, cmds))
		return 0
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", binary, args[0], usage(binary, cmds))
	return 2
}

func usage(binary string, cmds []Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s <command> [flags]\n\ncommands:\n", binary)
	for _, c := range cmds {
		fmt.Fprintf(&b, "  %-12s %s\n", c.Name, c.Summary)
	}
	return b.String()
}
