// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
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

// TestJobPodSettings: the extra settings of runner pods reach the Job's pod template, the
// tofu environment carries the runner's prefix, and the executor's own labels, volumes and
// mounts stay as they are.
func TestJobPodSettings(t *testing.T) {
	e := &Job{
		Namespace: "runs", Image: "fulfiller:test", ServiceAccountName: "fulfiller-runner",
		PriorityClassName: "system-cluster-critical",
		ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "registry"}},
		PodLabels:         map[string]string{"team": "platform"},
		PodAnnotations:    map[string]string{"sidecar.istio.io/inject": "false"},
		TofuEnv: []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy:3128"},
			{Name: "AWS_REGION", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "aws"}, Key: "region"}}}},
		TofuEnvFrom:  []corev1.EnvFromSource{{Prefix: "S3_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s3"}}}},
		Volumes:      []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "ca-bundle"}}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "ca", MountPath: "/etc/ssl/extra", ReadOnly: true}},
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	req := tfrunner.Request{Name: "claim-a-apply-1", Operation: tfrunner.Apply, Labels: map[string]string{keys.LabelNodeClaim: "claim-a"}}
	job := e.job(req)
	pod := job.Spec.Template
	if pod.Spec.PriorityClassName != "system-cluster-critical" || len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "registry" {
		t.Errorf("priority class %q, pull secrets %v", pod.Spec.PriorityClassName, pod.Spec.ImagePullSecrets)
	}
	if pod.Labels["team"] != "platform" || pod.Labels[keys.LabelNodeClaim] != "claim-a" || pod.Labels[keys.LabelManagedBy] != keys.ManagedBy ||
		pod.Annotations["sidecar.istio.io/inject"] != "false" {
		t.Errorf("pod labels %v, annotations %v", pod.Labels, pod.Annotations)
	}
	if _, ok := job.Labels["team"]; ok {
		t.Errorf("the Job (and so its request Secret) got the pods' labels: %v", job.Labels)
	}
	c := pod.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, v := range c.Env {
		env[v.Name] = v
	}
	if env[tfrunner.TofuEnvPrefix+"HTTPS_PROXY"].Value != "http://proxy:3128" || env[tfrunner.TofuEnvPrefix+"AWS_REGION"].ValueFrom == nil || env["TMPDIR"].Value != jobTmpDir {
		t.Errorf("env %+v", c.Env)
	}
	if _, ok := env["HTTPS_PROXY"]; ok {
		t.Error("a tofu environment variable without the runner's prefix")
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].Prefix != tfrunner.TofuEnvPrefix+"S3_" || c.EnvFrom[0].SecretRef.Name != "s3" {
		t.Errorf("envFrom %+v", c.EnvFrom)
	}
	if e.TofuEnv[0].Name != "HTTPS_PROXY" || e.TofuEnvFrom[0].Prefix != "S3_" {
		t.Error("building the Job changed the executor's settings")
	}
	var volumes, mounts []string
	for _, v := range pod.Spec.Volumes {
		volumes = append(volumes, v.Name)
	}
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	if !slices.Equal(volumes, []string{requestVolume, workVolume, tmpVolume, "ca"}) ||
		!slices.Equal(mounts, []string{requestVolume + ":" + jobRequestDir, workVolume + ":" + jobWorkDir, tmpVolume + ":" + jobTmpDir, "ca:/etc/ssl/extra"}) {
		t.Errorf("volumes %v, mounts %v", volumes, mounts)
	}
	// Without extra settings, the pod has none of them.
	plain := (&Job{Namespace: "runs", Image: "fulfiller:test"}).job(req).Spec.Template
	if plain.Spec.PriorityClassName != "" || plain.Spec.ImagePullSecrets != nil || plain.Annotations != nil || len(plain.Spec.Volumes) != 3 {
		t.Errorf("a plain runner pod: %+v", plain)
	}
}

func TestJobValidate(t *testing.T) {
	secret := &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}
	emptyDir := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	for _, tc := range []struct {
		name   string
		change func(*Job)
		want   string // in the error; empty: valid
	}{
		{"none", func(*Job) {}, ""},
		{"own label", func(e *Job) { e.PodLabels = map[string]string{keys.LabelNodeClaim: "x"} }, "pod label karpenter.sh/nodeclaim is the executor's own"},
		{"job controller's label", func(e *Job) { e.PodLabels = map[string]string{"batch.kubernetes.io/job-name": "x"} }, "is the executor's own"},
		{"bad label key", func(e *Job) { e.PodLabels = map[string]string{"a b": "x"} }, `pod label "a b"`},
		{"bad label value", func(e *Job) { e.PodLabels = map[string]string{"team": "a b"} }, `pod label team="a b"`},
		{"bad annotation", func(e *Job) { e.PodAnnotations = map[string]string{"/x": "y"} }, `pod annotation "/x"`},
		{"own volume name", func(e *Job) { e.Volumes = []corev1.Volume{{Name: "work", VolumeSource: emptyDir}} }, "volume work: the name is taken"},
		{"volume twice", func(e *Job) {
			e.Volumes = []corev1.Volume{{Name: "a", VolumeSource: emptyDir}, {Name: "a", VolumeSource: emptyDir}}
		}, "volume a: the name is taken"},
		{"bad volume name", func(e *Job) { e.Volumes = []corev1.Volume{{Name: "A_B", VolumeSource: emptyDir}} }, `volume "A_B"`},
		{"mount of no extra volume", func(e *Job) { e.VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/x"}} }, "volume mount work names none of the extra volumes"},
		{"mount on the work folder", func(e *Job) {
			e.Volumes = []corev1.Volume{{Name: "a", VolumeSource: emptyDir}}
			e.VolumeMounts = []corev1.VolumeMount{{Name: "a", MountPath: "/work"}}
		}, "volume mount a: /work is taken"},
		{"relative mount", func(e *Job) {
			e.Volumes = []corev1.Volume{{Name: "a", VolumeSource: emptyDir}}
			e.VolumeMounts = []corev1.VolumeMount{{Name: "a", MountPath: "etc"}}
		}, "is not absolute"},
		{"terraform-exec's variable", func(e *Job) { e.TofuEnv = []corev1.EnvVar{{Name: "TF_LOG", Value: "debug"}} }, "that terraform-exec sets itself for every command: TF_LOG"},
		{"bad variable name", func(e *Job) { e.TofuEnv = []corev1.EnvVar{{Name: "A=B"}} }, `tofu environment variable "A=B"`},
		{"envFrom of both", func(e *Job) {
			e.TofuEnvFrom = []corev1.EnvFromSource{{SecretRef: secret, ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}}
		}, "tofu envFrom 0: name either a Secret or a ConfigMap"},
		{"valid extras", func(e *Job) {
			e.PodLabels = map[string]string{"example.com/team": "platform"}
			e.TofuEnv = []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy:3128"}}
			e.TofuEnvFrom = []corev1.EnvFromSource{{SecretRef: secret}}
			e.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: emptyDir}}
			e.VolumeMounts = []corev1.VolumeMount{{Name: "cache", MountPath: "/var/cache/tofu"}}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Job{Namespace: "runs", Image: "fulfiller:test"}
			tc.change(e)
			err := e.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

// A runner stopped by its Job's deadline reports Cancelled; the run failed with Timeout,
// whether or not the Job controller has set DeadlineExceeded yet. Cancelled before the
// deadline stays Cancelled.
func TestDeadlinePassed(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	started := metav1.NewTime(t0)
	limit := int64(3)
	job := &batchv1.Job{Spec: batchv1.JobSpec{ActiveDeadlineSeconds: &limit}, Status: batchv1.JobStatus{StartTime: &started}}
	cond := &batchv1.JobCondition{Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"}
	for _, tc := range []struct {
		name     string
		cond     *batchv1.JobCondition
		finished time.Time
		why      string
		passed   bool
	}{
		{"condition set", cond, t0.Add(time.Second), "Job was active longer than specified deadline", true},
		{"past the deadline, no condition yet", nil, t0.Add(3200 * time.Millisecond), "the Job was active longer than its 3s", true},
		{"before the deadline", nil, t0.Add(2 * time.Second), "", false},
	} {
		if why, passed := deadlinePassed(job, tc.cond, tc.finished); why != tc.why || passed != tc.passed {
			t.Errorf("%s: got %q %t", tc.name, why, passed)
		}
	}
	if _, passed := deadlinePassed(&batchv1.Job{}, nil, t0); passed {
		t.Error("a Job without a deadline passed it")
	}
}
