// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claimlogs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestPrint: the runner's log while it lasts (a Job's pod, a local run's file), rendered or
// raw; the kept tail of a failed run once it is gone; a clear error when neither exists.
func TestPrint(t *testing.T) {
	dir := t.TempDir()
	localLog := filepath.Join(dir, "run.log")
	line := `{"@level":"error","@message":"Error: resource_unavailable","@module":"tofu.ui","@timestamp":"2026-12-02T17:59:58Z","type":"diagnostic","diagnostic":{"severity":"error","summary":"resource_unavailable","detail":"sold out"}}`
	if err := os.WriteFile(localLog, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim-a"}}
	f.Status.Runs = []v1alpha1.Run{
		{Name: "claim-a-apply-1", Operation: "apply", Phase: v1alpha1.RunFailed, ErrorClass: "Transient", Log: "job/claim-a-apply-1", LogTail: "17:59:58Z error Error: timeout\n"},
		{Name: "claim-a-apply-2", Operation: "apply", Phase: v1alpha1.RunSucceeded, Log: "job/claim-a-apply-2"},
		{Name: "claim-a-apply-3", Operation: "apply", Phase: v1alpha1.RunFailed, Log: localLog},
		{Name: "claim-a-destroy-1", Operation: "destroy", Phase: v1alpha1.RunRunning, Log: "job/claim-a-destroy-1"},
	}
	kube := test.NewClient(nil, f)
	clientset := k8sfake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: "claim-a-destroy-1-x",
		Labels: map[string]string{batchv1.JobNameLabel: "claim-a-destroy-1"}}})
	for _, tc := range []struct {
		name, claim, run string
		json             bool
		out, notes       string
		err              string
	}{
		// client-go's fake serves every pod's log as "fake logs".
		{name: "RunnerJob", claim: "claim-a", out: "fake logs\n"},
		{name: "KeptTail", claim: "claim-a", run: "claim-a-apply-1", out: "17:59:58Z error Error: timeout\n",
			notes: "the runner's log of claim-a-apply-1 is gone; the tail its record kept (Failed, Transient):\n"},
		{name: "NoTail", claim: "claim-a", run: "claim-a-apply-2", err: "its runner's log is gone and its record keeps no tail"},
		{name: "LocalRendered", claim: "claim-a", run: "claim-a-apply-3", out: "17:59:58Z error Error: resource_unavailable\n    sold out\n"},
		{name: "LocalJSON", claim: "claim-a", run: "claim-a-apply-3", json: true, out: line + "\n"},
		{name: "UnknownRun", claim: "claim-a", run: "claim-a-apply-9", err: "claim claim-a has no run claim-a-apply-9 (its runs: claim-a-apply-1, claim-a-apply-2, claim-a-apply-3, claim-a-destroy-1)"},
		{name: "UnknownClaim", claim: "claim-b", err: "claim claim-b has no Fulfillment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, notes strings.Builder
			err := Print(context.Background(), tc.claim, Options{Kube: kube, Clientset: clientset, Namespace: DefaultNamespace, Run: tc.run,
				JSON: tc.json, Out: &out, Notes: &notes})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				if tc.name == "NoTail" && !errors.Is(err, ErrNoLog) {
					t.Errorf("error %v is no ErrNoLog", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.out || notes.String() != tc.notes {
				t.Errorf("printed %q, noted %q; want %q, %q", out.String(), notes.String(), tc.out, tc.notes)
			}
		})
	}
}

func TestMainUsage(t *testing.T) {
	var out, errOut strings.Builder
	for _, args := range [][]string{nil, {"-n"}, {"claim-a", "claim-b"}} {
		if code := Main(args, &out, &errOut); code != 2 {
			t.Errorf("logs %v: exit code %d, want 2", args, code)
		}
	}
	if !strings.Contains(errOut.String(), "usage: fulfiller logs") {
		t.Errorf("no usage: %q", errOut.String())
	}
}
