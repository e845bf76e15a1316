// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor_test

import (
	"testing"

	"k8s.io/utils/clock"

	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// TestFakeExecutorContract runs the fake executor through the executor contract, as the local
// and Job executors are run, so that tests driving runs with the fake see what they would see
// with a real executor. The fake runs no tofu: the suite scripts each run as its module would
// behave, and checks what the executor itself does.
func TestFakeExecutorContract(t *testing.T) {
	for _, gone := range []bool{false, true} {
		name := "LocalLike"
		if gone {
			name = "JobLike"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			executor.ExecutorContract(t, executor.Contract{
				NewExecutor: func(*testing.T) executor.Executor {
					e := fake.New(clock.RealClock{})
					e.CancelledGone = gone
					return e
				},
				Logs:          func(*testing.T, executor.RunStatus) string { return "(the fake keeps no log)" },
				CancelledGone: gone,
				RequestExists: func(_ *testing.T, e executor.Executor, run string) bool {
					return e.(*fake.Executor).HasRequest(run)
				},
				Script: func(_ *testing.T, e executor.Executor, req tfrunner.Request, b executor.Behaviour) {
					o := fake.Outcome{Polls: 1, Hold: b.Hold, StopDelay: b.StopDelay}
					if b.Fail != "" {
						o.Error = &tfrunner.RunError{Class: b.Fail, Message: "the module failed with " + string(b.Fail)}
						o.Log = `{"@level":"error","@message":"Error: ` + o.Error.Message + `","@module":"tofu.ui","type":"diagnostic","diagnostic":{"severity":"error","summary":"` + o.Error.Message + `"}}` + "\n"
					}
					e.(*fake.Executor).Script(req.Name, o)
				},
			})
		})
	}
}
