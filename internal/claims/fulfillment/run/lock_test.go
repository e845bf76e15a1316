// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

func TestJudgeLock(t *testing.T) {
	held := &statelock.Holder{ID: "5c1d", Who: "root@sim-abc-apply-1-xk2p9", Operation: "OperationTypeApply",
		Created: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name    string
		holder  *statelock.Holder
		a       executor.Attribution
		want    lockVerdict
		message string // part of the blocked message
	}{
		{name: "free", want: lockFree},
		{name: "runner gone", holder: held, a: executor.Attribution{Run: "sim-abc-apply-1", Gone: true}, want: lockStale},
		{name: "runner alive", holder: held, a: executor.Attribution{Run: "sim-abc-apply-1", Detail: "runner pod sim-abc-apply-1-xk2p9 of run sim-abc-apply-1 is running"},
			want: lockRunning, message: "state lock held by run sim-abc-apply-1 (root@sim-abc-apply-1-xk2p9) since 2026-11-30T12:00:00Z"},
		// Someone outside the fulfiller (a person running tofu by hand): never broken.
		{name: "not ours", holder: held, a: executor.Attribution{}, want: lockForeign,
			message: "state lock held by root@sim-abc-apply-1-xk2p9 (lock 5c1d, OperationTypeApply) since 2026-11-30T12:00:00Z, which is not a run of this claim; once it is gone, release it with `tofu force-unlock 5c1d`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeLock(tc.holder, tc.a)
			if v != tc.want {
				t.Fatalf("verdict %d, want %d", v, tc.want)
			}
			if tc.message != "" {
				if got := lockBlocked(tc.holder, tc.a, v); !strings.Contains(got, tc.message) {
					t.Errorf("message %q\nwant it to contain %q", got, tc.message)
				}
			}
		})
	}
}
