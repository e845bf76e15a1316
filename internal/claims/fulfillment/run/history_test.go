// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestRunNameAtTheLimit: Karpenter names a claim "<nodepool>-<5 characters>" with the API
// server's generateName, which keeps at most 58 characters of the NodePool's name, so claim
// names have up to 63 characters (NodePool names are DNS subdomains and may have dots). Every
// run name is a DNS-1123 label of at most 63 characters (a Job's name, a pod's hostname),
// stable, and different per operation and attempt; short ones stay readable as they were.
func TestRunNameAtTheLimit(t *testing.T) {
	pool := strings.Repeat("p", 63)
	claim := pool[:58] + "x7k2q" // what generateName makes of "<pool>-"
	dotted := "gpu.large-x7k2q"
	seen := map[string]string{}
	for _, name := range []string{claim, "sim-x7k2q", dotted, strings.Repeat("a", 40) + "-x7k2q"} {
		f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, op := range []tfrunner.Operation{tfrunner.Apply, tfrunner.Destroy} {
			for _, attempt := range []int{1, 2, 10, 123} {
				run := Name(f, op, attempt)
				if errs := validation.IsDNS1123Label(run); len(errs) > 0 {
					t.Errorf("run %d of %s of claim %s: %q is no DNS-1123 label: %v", attempt, op, name, run, errs)
				}
				if again := Name(f, op, attempt); again != run {
					t.Errorf("run name not stable: %q, then %q", run, again)
				}
				if prev, dup := seen[run]; dup {
					t.Errorf("run name %q for both %s and %s %s %d", run, prev, name, op, attempt)
				}
				seen[run] = name + " " + string(op)
				if full := name + "-" + string(op) + "-" + strconv.Itoa(attempt); len(full) <= 63 && !strings.Contains(name, ".") && run != full {
					t.Errorf("run name %q, want the readable %q", run, full)
				}
				if !strings.HasSuffix(run, "-"+string(op)+"-"+strconv.Itoa(attempt)) {
					t.Errorf("run name %q does not end in its operation and attempt", run)
				}
			}
		}
	}
}

// TestBackoffBounded: a failed run is retried after RetryBackoff doubled per attempt, at most
// 60 times it (5 minutes of the default 5 s), however many attempts failed: the shift cannot
// overflow into a negative or huge wait once attempts outnumber the run history.
func TestBackoffBounded(t *testing.T) {
	for _, first := range []time.Duration{DefaultRetryBackoff, 100 * time.Millisecond} {
		r := New(Options{RetryBackoff: first})
		for _, tc := range []struct {
			attempts int
			want     time.Duration
		}{
			{0, first}, {1, first}, {2, 2 * first}, {6, 32 * first}, {7, 60 * first}, {11, 60 * first}, {70, 60 * first}, {1 << 20, 60 * first},
		} {
			if got := r.backoff(tc.attempts); got != tc.want {
				t.Errorf("first %s, backoff(%d) = %s, want %s", first, tc.attempts, got, tc.want)
			}
		}
	}
	if got := New(Options{}).backoff(100); got != 5*time.Minute {
		t.Errorf("default backoff after 100 attempts = %s, want 5m", got)
	}
}
