package tfrunner

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestTerminationMessageFits(t *testing.T) {
	now := time.Now().UTC()
	small := Result{Operation: Apply, Succeeded: true, ProviderID: "sim://a/1", Started: now, Finished: now,
		Outputs: map[string]json.RawMessage{"node_name": json.RawMessage(`"a"`)}}
	data, err := TerminationMessage(small)
	if err != nil || strings.Contains(string(data), "\n") || !strings.Contains(string(data), `"node_name"`) {
		t.Errorf("small result: %s, %v", data, err)
	}
	big := small
	big.Outputs = map[string]json.RawMessage{"blob": json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)}
	data, err = TerminationMessage(big)
	if err != nil || len(data) > MaxTerminationMessage || strings.Contains(string(data), "blob") || !strings.Contains(string(data), "sim://a/1") {
		t.Errorf("big result: %d bytes, %v", len(data), err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil || back.ProviderID != "sim://a/1" || !back.Started.Equal(now) {
		t.Errorf("decoded %+v, %v", back, err)
	}
}

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
		class    ErrorClass
		message  string
	}{
		{"deadline", deadline, nil, Timeout, "the run's deadline passed: Job was active longer than specified deadline"},
		{"oom", nil, []*corev1.Pod{terminated("OOMKilled", 137)}, Unknown, "runner was killed for using more memory than its limit (OOMKilled)"},
		{"evicted", nil, []*corev1.Pod{evicted}, Unknown, "runner pod : Evicted: The node was low on resource: memory."},
		{"crashed", nil, []*corev1.Pod{terminated("Error", 2)}, Unknown, "runner exited with code 2 (Error) without a result"},
		{"pod gone", nil, nil, Unknown, "runner Job failed without a result: BackoffLimitExceeded: Job has reached the specified backoff limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lostRunError(&batchv1.Job{}, failed, tc.deadline, tc.pods)
			if err.Class != tc.class || err.Message != tc.message {
				t.Errorf("got %s: %q", err.Class, err.Message)
			}
		})
	}
}
