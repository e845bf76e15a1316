// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package devenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildDevBinaries builds the development binaries of the repository at root into dir:
// fulfiller-dev (the environment's controller), with the runner and the simulated machine's
// binaries beside it, where its local executor, modules/sim and the stand-ins find them. It
// returns fulfiller-dev's path. The end-to-end and soak suites start their environments
// with it.
func BuildDevBinaries(root, dir string) (string, error) {
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/fulfiller-dev", "./cmd/fulfiller-runner", "./cmd/fulfiller-sim")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building fulfiller-dev: %w", err)
	}
	return filepath.Join(dir, "fulfiller-dev"), nil
}

// UpWith starts the local environment in dir as a user does, `bin dev up --dir dir
// --executor executor`, its output on this process's stderr; down stops it with `dev down`.
func UpWith(bin, dir, executor string) (down func() error, err error) {
	up := exec.Command(bin, "dev", "up", "--dir", dir, "--executor", executor)
	up.Stdout, up.Stderr = os.Stderr, os.Stderr
	if err := up.Run(); err != nil {
		return nil, fmt.Errorf("dev up: %w", err)
	}
	return func() error {
		down := exec.Command(bin, "dev", "down", "--dir", dir)
		down.Stdout, down.Stderr = os.Stderr, os.Stderr
		if err := down.Run(); err != nil {
			return fmt.Errorf("dev down: %w", err)
		}
		return nil
	}, nil
}

// DumpLogs prints the tails of the environment's own log and its controller's log to this
// process's stderr, for a failed suite.
func DumpLogs(dir string) {
	l := Layout{Dir: dir}
	for _, f := range []string{l.Log(), l.ControllerLog()} {
		data, _ := os.ReadFile(f)
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}
		fmt.Fprintf(os.Stderr, "---- %s (tail) ----\n%s\n", filepath.Base(f), data)
	}
}
