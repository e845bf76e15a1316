// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package bench holds the benchmarks of the whole pipeline (`make bench`). They are not run by
// `go test ./...`: each sets up a real control plane, builds the development binary and runs
// real tofu, and reports what it measured with b.ReportMetric. Run them with -benchtime=1x:
// every benchmark makes its own fixed number of measurements per iteration and reports medians.
package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// root is the repository root.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// fulfillerBuild is a development binary and the source tree it was built from, whose modules
// its runs use: a revision's runs need that revision's modules, which may call commands of
// its own binary.
type fulfillerBuild struct {
	bin string
	src string
}

// modules is the build's modules folder.
func (f fulfillerBuild) modules() string { return filepath.Join(f.src, "modules") }

// buildFulfillerDev builds the development binary into dir (the local environment, and the
// FULFILLER_BINARY of modules/sim) and the runner and machine binaries beside it, which its
// local executor, modules/sim and the stand-ins start.
func buildFulfillerDev(b *testing.B, dir string) fulfillerBuild {
	b.Helper()
	bin := filepath.Join(dir, "fulfiller-dev")
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/fulfiller-dev", "./cmd/fulfiller-runner", "./cmd/fulfiller-sim")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root(), os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("building fulfiller-dev: %v", err)
	}
	return fulfillerBuild{bin: bin, src: root()}
}

// devUp starts the local environment in dir with executor (and the extra environment for
// the controller), and returns its client, its variables for the examples and how to stop it.
func devUp(b *testing.B, build fulfillerBuild, dir, executor string, extraEnv ...string) (client.Client, map[string]string, func()) {
	b.Helper()
	bin := build.bin
	up := exec.Command(bin, "dev", "up", "--dir", dir, "--executor", executor)
	up.Env = append(os.Environ(), extraEnv...)
	up.Stdout, up.Stderr = os.Stderr, os.Stderr
	if err := up.Run(); err != nil {
		b.Fatalf("dev up: %v", err)
	}
	down := func() { _ = exec.Command(bin, "dev", "down", "--dir", dir).Run() }
	kube, err := devenv.Client(dir)
	if err != nil {
		down()
		b.Fatal(err)
	}
	vars, err := devenv.Vars(dir, build.modules())
	if err != nil {
		down()
		b.Fatal(err)
	}
	return kube, vars, down
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rounds is BENCH_ROUNDS when set (a positive number), else def: how many measurements of
// each kind one iteration of a benchmark makes.
func rounds(def int) int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return def
}

func ctxFor(b *testing.B, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	b.Cleanup(cancel)
	return ctx
}

// providersEnv is the runner's environment entry that gives tofu the tools' CLI
// configuration (controlplane.TofuRC), so that providers come from the tools' mirror: a
// runner passes its FULFILLER_TOFU_ENV_* variables on to tofu without the prefix.
func providersEnv() (string, error) {
	rc, err := controlplane.TofuRC()
	if err != nil {
		return "", err
	}
	return tfrunner.TofuEnvPrefix + "TF_CLI_CONFIG_FILE=" + rc, nil
}
