// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestLostRunError(t *testing.T) {
	failed := &batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}
	deadline := &batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"}
	terminated := func(reason string, code int32) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: runnerContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}},
		}}}}
	}
	evicted := &corev1.Pod{Status: corev1.PodStatus{Reason: "Evicted", Message: "The node was low on resource: memory."}}
	for _, tc := range []struct {
		name     string
		deadline *batchv1.JobCondition
		pods     []*corev1.Pod
		class    tfrunner.ErrorClass
		message  string
	}{
		{"deadline", deadline, nil, tfrunner.Timeout, "the run's deadline passed: Job was active longer than specified deadline"},
		{"oom", nil, []*corev1.Pod{terminated("OOMKilled", 137)}, tfrunner.Unknown, "runner was killed for using more memory than its limit (OOMKilled)"},
		{"evicted", nil, []*corev1.Pod{evicted}, tfrunner.Unknown, "runner pod : Evicted: The node was low on resource: memory."},
		{"crashed", nil, []*corev1.Pod{terminated("Error", 2)}, tfrunner.Unknown, "runner exited with code 2 (Error) without a result"},
		{"pod gone", nil, nil, tfrunner.Unknown, "runner Job failed without a result: BackoffLimitExceeded: Job has reached the specified backoff limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lostRunError(&batchv1.Job{}, failed, tc.deadline, tc.pods)
			if err.Class != tc.class || err.Message != tc.message {
				t.Errorf("got %s: %q", err.Class, err.Message)
			}
		})
	}
}
