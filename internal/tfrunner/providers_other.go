// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package tfrunner

import "os/exec"

// dieWithRunner: only Linux can have a child die with its parent; elsewhere a provider
// dies with the run's session when the executor kills it.
func dieWithRunner(*exec.Cmd) {}
