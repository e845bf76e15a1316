// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package proc

import "errors"

// ErrExitedZero is what WaitError makes of a wait that returned nil.
var ErrExitedZero = errors.New("exit status 0")

// WaitError returns how a process that was meant to run until stopped ended: the error of
// its wait (exec.Cmd.Wait), or ErrExitedZero when it exited with status 0, which for such a
// process is as unexpected as any other end. It is never nil, so a message can wrap it.
func WaitError(waitErr error) error {
	if waitErr == nil {
		return ErrExitedZero
	}
	return waitErr
}
