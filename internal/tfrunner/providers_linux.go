// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"os/exec"
	"syscall"
)

// dieWithRunner has the kernel kill a provider the runner started when the runner dies, so
// that a runner killed or crashed leaves no provider behind (tofu's own children die with
// the run's session).
func dieWithRunner(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
