// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package devenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const usage = `usage: fulfiller-dev dev <up|down|demo> --dir DIR [--executor local|job] [--hcloud]

  up     start the local environment in the background: a control plane, the controller
         (Karpenter + fulfiller, local executor) and simulated machines; writes DIR/kubeconfig;
         with --hcloud also a Hetzner Cloud API stand-in (endpoint in DIR/hcloud-endpoint)
  down   stop it and everything it started
  demo   up, then pending pods get nodes, stage timings, scale to zero, consolidation, down;
         with --hcloud on modules/hetzner-cloud and the real hcloud provider, against the
         stand-in (examples/local-hcloud)
`

// explicit reports whether the flag name was given on the command line.
func explicit(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// Main implements `fulfiller-dev dev`.
func Main(args []string) int {
	if len(args) < 1 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("dev "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", ".dev", "folder of the environment")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long up waits for the environment")
	examples := fs.String("examples", "examples/local", "folder of the example manifests (demo)")
	modules := fs.String("modules", "modules", "folder of the node-type modules (demo)")
	keep := fs.Bool("keep", false, "leave the environment running after the demo")
	executor := fs.String("executor", ExecutorLocal, "where tofu runs: local (child processes of the controller) or job (Kubernetes Jobs run by a stand-in kubelet)")
	hcloud := fs.Bool("hcloud", false, "also run a Hetzner Cloud API stand-in (its servers are simulated machines); demo: on modules/hetzner-cloud (examples/local-hcloud)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var err error
	switch args[0] {
	case "up":
		if err = Up(*dir, *timeout, *executor, *hcloud); err == nil {
			fmt.Printf("environment ready: export KUBECONFIG=%s\n", Layout{*dir}.Kubeconfig())
		}
	case "down":
		err = Down(*dir, time.Minute)
	case "serve":
		err = Serve(*dir, *executor, *hcloud)
	case "demo":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		o := DemoOptions{Dir: *dir, Examples: *examples, Modules: *modules, Keep: *keep, Executor: *executor, Out: os.Stdout}
		if *hcloud {
			o.Hcloud = true
			if !explicit(fs, "examples") {
				o.Examples = "examples/local-hcloud"
			}
		}
		err = Demo(ctx, o)
	default:
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fulfiller-dev dev:", err)
		return 1
	}
	return 0
}
