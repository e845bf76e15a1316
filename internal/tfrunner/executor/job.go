// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Paths inside a runner container.
const (
	jobRequestDir   = "/run/request" // the request Secret, read-only
	jobWorkDir      = "/work"        // an emptyDir: the run's Request.WorkDir
	jobTmpDir       = "/tmp"         // an emptyDir: the root filesystem is read-only
	runnerContainer = "runner"
	requestVolume   = "request"
	workVolume      = "work"
	tmpVolume       = "tmp"
	// jobNameLabel is set by the Job controller on a Job's pods.
	jobNameLabel = "batch.kubernetes.io/job-name"
	// controllerUIDLabel tells pods of a deleted Job from those of a new one of the same name.
	controllerUIDLabel = "batch.kubernetes.io/controller-uid"
)

// Defaults of Job.
const (
	DefaultJobDeadline      = 30 * time.Minute
	DefaultTTLAfterFinished = time.Hour
	// DefaultRunnerUser is the image's non-root user and group (the user hack/image makes).
	DefaultRunnerUser = 65532
)

// Job runs each run as a Kubernetes Job in Namespace, named after the run, running
// `<Command> --request /run/request/request.json --work-dir /work --termination-log
// /dev/termination-log` in Image. The request (which holds the claim's user data) is only in a
// Secret of the same name, owned by the Job and mounted read-only; the Job's spec holds no
// user data. The runner writes its result to the container's termination message, which
// Status reads from the pod: no log parsing. `kubectl logs job/<name>` shows the run's log.
//
// The Job has no retries (backoffLimit 0: the controller decides), a deadline per operation,
// a grace period longer than tofu's interrupt grace, and stays for TTLAfterFinished once done
// so its log can be read. All state is in the API server, so a restarted controller finds its
// runs with a new Job. Runs start through Limiter, which counts the active Jobs
// labelled managed-by fulfiller in Namespace; Start returns an *AdmissionError (ErrBusy) when
// it refuses one.
type Job struct {
	Client    kubernetes.Interface
	Namespace string
	// Image is the controller's image (tofu and the modules baked in).
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// Command is the runner (default "fulfiller", "run").
	Command []string
	// ServiceAccountName is the runners' ServiceAccount (RBAC for the state backend only).
	ServiceAccountName string
	// EnvFromSecrets name Secrets in Namespace whose keys become tofu's environment (through
	// TofuEnvPrefix): the provider credentials. Request.Env, which travels in the request
	// Secret, suits other values; Env is the runner container's own, non-secret environment.
	EnvFromSecrets []string
	Env            []corev1.EnvVar
	// Resources of the runner container (default: requests 100m CPU, 256Mi memory; limit
	// 1Gi memory).
	Resources *corev1.ResourceRequirements
	// Backstop is the activeDeadlineSeconds of a run whose request has no deadline of its
	// own (default DefaultJobDeadline); a run past it fails with class Timeout. The
	// fulfiller's requests always have one (Request.Deadline), and their Job's backstop is
	// that plus the grace period.
	Backstop time.Duration
	// TTLAfterFinished is how long a finished Job (and its log) stays (default
	// DefaultTTLAfterFinished).
	TTLAfterFinished time.Duration
	// Grace is the pod's termination grace period (default TofuInterruptGrace + 30s).
	Grace time.Duration
	// Limiter admits new runs (default: its own, DefaultMaxConcurrent at once).
	Limiter *Limiter
	// NodeSelector and Tolerations place runner pods.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// User is the runner's user, group and fsGroup (default DefaultRunnerUser): the pod runs
	// as it under the restricted Pod Security level, and the request Secret is given to the
	// group.
	User int64
	// PriorityClassName of runner pods (empty: none). A run is what adds capacity: above the
	// workloads' priority, a runner pod that finds the static nodes full preempts a workload
	// pod instead of waiting, so a full static pool does not stop all provisioning.
	PriorityClassName string
	// ImagePullSecrets of runner pods (Secrets in Namespace).
	ImagePullSecrets []corev1.LocalObjectReference
	// PodLabels and PodAnnotations are added to runner pods. The executor's own labels are not
	// among them (Validate).
	PodLabels      map[string]string
	PodAnnotations map[string]string
	// TofuEnv and TofuEnvFrom are environment variables of tofu and its providers in every
	// run. In the runner container each name carries TofuEnvPrefix, which the runner strips,
	// so they reach tofu as given while the runner passes none of its own environment on.
	TofuEnv     []corev1.EnvVar
	TofuEnvFrom []corev1.EnvFromSource
	// Volumes are added to runner pods and VolumeMounts to the runner container (a CA
	// bundle, SSH keys for module sources, a provider cache); a mount names one of Volumes.
	Volumes      []corev1.Volume
	VolumeMounts []corev1.VolumeMount

	// OnEnd, when set before StartCache, is called with a run's name and labels when its cache
	// sees the run end (its runner wrote its result, its Job finished or was deleted); Status
	// then says the end is reported (RunStatus.EndReported).
	OnEnd func(name string, labels map[string]string)

	ownLimiter Limiter
	// cache, once StartCache synced it, answers the reads of Start and Status.
	cache *jobCache
}

func (e *Job) limiter() *Limiter {
	if e.Limiter != nil {
		return e.Limiter
	}
	return &e.ownLimiter
}

var _ Executor = (*Job)(nil)

func (e *Job) grace() time.Duration {
	if e.Grace > 0 {
		return e.Grace
	}
	return tfrunner.TofuInterruptGrace + 30*time.Second
}

// deadline is the Job's activeDeadlineSeconds: the request's deadline (which the runner
// enforces by interrupting tofu) plus the grace period, so that the runner's own ending comes
// first; Backstop for a request without one.
func (e *Job) deadline(req tfrunner.Request) time.Duration {
	if req.Deadline > 0 {
		return req.Deadline + e.grace()
	}
	if e.Backstop > 0 {
		return e.Backstop
	}
	return DefaultJobDeadline
}

// Start implements Executor. Request.WorkDir is replaced by the Job's working folder; a
// runner pod has no module cache (Request.CacheDir): it would start empty in every pod, and
// filling it costs more than the one run it would serve.
func (e *Job) Start(ctx context.Context, req tfrunner.Request) error {
	req.WorkDir, req.CacheDir = jobWorkDir, ""
	if err := req.Validate(); err != nil {
		return err
	}
	return e.limiter().Start(ctx, req, StartSteps{
		Exists: func(ctx context.Context) (bool, error) {
			job, found, err := e.readJob(ctx, req.Name)
			if !found || err != nil {
				return false, err
			}
			if err := CheckOwner(req.Name, job.Labels, req.Labels[keys.LabelNodeClaimUID]); err != nil {
				return true, err
			}
			if _, done := jobFinished(job); done || job.DeletionTimestamp != nil {
				return true, nil
			}
			return true, e.ensureSecret(ctx, job, req) // a Start that stopped between the two
		},
		InProgress: e.inProgress,
		Create:     func(ctx context.Context) error { return e.create(ctx, req) },
	})
}

// readJob reads the named Job: from the cache when there is one (only the executor creates
// its Jobs, so one the synced cache does not have does not exist, or did not a moment ago:
// creating it again finds it), else, and for one it created that the cache does not show
// yet, from the API server.
func (e *Job) readJob(ctx context.Context, name string) (*batchv1.Job, bool, error) {
	if e.cache != nil {
		if job, found, fresh, err := e.cache.job(name); fresh || err != nil {
			return job, found, err
		}
	}
	job, err := e.Client.BatchV1().Jobs(e.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading Job %s: %w", name, err)
	}
	return job, true, nil
}

// create creates the run's Job and its request Secret.
func (e *Job) create(ctx context.Context, req tfrunner.Request) error {
	jobs := e.Client.BatchV1().Jobs(e.Namespace)
	job, err := jobs.Create(ctx, e.job(req), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		job, err = jobs.Get(ctx, req.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating Job %s: %w", req.Name, err)
	}
	if e.cache != nil {
		e.cache.wrote(job.Name, false)
	}
	return e.ensureSecret(ctx, job, req)
}

// ensureSecret creates the request Secret, owned by the Job so that it goes with it. The pod
// waits for it (as a kubelet waits for a missing Secret volume).
func (e *Job) ensureSecret(ctx context.Context, job *batchv1.Job, req tfrunner.Request) error {
	data, err := json.MarshalIndent(req, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding request %s: %w", req.Name, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: req.Name, Namespace: e.Namespace, Labels: job.Labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{tfrunner.RequestFileName: data},
	}
	_, err = e.Client.CoreV1().Secrets(e.Namespace).Create(ctx, secret, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating request Secret %s: %w", req.Name, err)
	}
	return nil
}

// inProgress are the executor's Jobs that have not finished, by name.
func (e *Job) inProgress(ctx context.Context) (map[string]bool, error) {
	if e.cache != nil {
		return e.cache.inProgress()
	}
	list, err := e.Client.BatchV1().Jobs(e.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{keys.LabelManagedBy: keys.ManagedBy}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing runner Jobs: %w", err)
	}
	names := map[string]bool{}
	for i := range list.Items {
		if _, done := jobFinished(&list.Items[i]); !done && list.Items[i].DeletionTimestamp == nil {
			names[list.Items[i].Name] = true // a Job is named after its run
		}
	}
	return names, nil
}

// job builds the Job of a run. Nothing from the request but its name, operation and labels
// goes into it.
func (e *Job) job(req tfrunner.Request) *batchv1.Job {
	lbls := maps.Clone(req.Labels)
	if lbls == nil {
		lbls = map[string]string{}
	}
	lbls[keys.LabelOperation] = string(req.Operation)
	lbls[keys.LabelManagedBy] = keys.ManagedBy
	command := e.Command
	if len(command) == 0 {
		command = []string{"fulfiller", "run"}
	}
	var envFrom []corev1.EnvFromSource
	for _, name := range e.EnvFromSecrets {
		envFrom = append(envFrom, corev1.EnvFromSource{Prefix: tfrunner.TofuEnvPrefix, SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name},
		}})
	}
	for _, from := range e.TofuEnvFrom {
		from.Prefix = tfrunner.TofuEnvPrefix + from.Prefix
		envFrom = append(envFrom, from)
	}
	env := append([]corev1.EnvVar{{Name: tfrunner.ServiceAccountDirEnv, Value: tfrunner.ServiceAccountDir}, {Name: "TMPDIR", Value: jobTmpDir}}, e.Env...)
	for _, v := range e.TofuEnv {
		v.Name = tfrunner.TofuEnvPrefix + v.Name
		env = append(env, v)
	}
	// The executor's labels over the extra ones (Validate refuses extra ones of the same key).
	podLabels := maps.Clone(e.PodLabels)
	if podLabels == nil {
		podLabels = map[string]string{}
	}
	maps.Copy(podLabels, lbls)
	volumes := append([]corev1.Volume{
		{Name: requestVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: req.Name, DefaultMode: ptr.To[int32](0o440),
		}}},
		{Name: workVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}, e.Volumes...)
	mounts := append([]corev1.VolumeMount{
		{Name: requestVolume, MountPath: jobRequestDir, ReadOnly: true},
		{Name: workVolume, MountPath: jobWorkDir},
		{Name: tmpVolume, MountPath: jobTmpDir},
	}, e.VolumeMounts...)
	user := e.User
	if user <= 0 {
		user = DefaultRunnerUser
	}
	resources := e.resources()
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: req.Name, Namespace: e.Namespace, Labels: lbls},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			PodReplacementPolicy:    ptr.To(batchv1.Failed), // never two runners at once
			ActiveDeadlineSeconds:   ptr.To(int64(e.deadline(req) / time.Second)),
			TTLSecondsAfterFinished: ptr.To(int32(orDefault(e.TTLAfterFinished, DefaultTTLAfterFinished) / time.Second)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: maps.Clone(e.PodAnnotations)},
				Spec: corev1.PodSpec{
					// tofu records user@hostname as a lock's holder: the run's name, whole,
					// where the pod's name is cut short for a long one (AttributeLock).
					Hostname:                      req.Name,
					RestartPolicy:                 corev1.RestartPolicyNever,
					ServiceAccountName:            e.ServiceAccountName,
					TerminationGracePeriodSeconds: ptr.To(int64(e.grace() / time.Second)),
					EnableServiceLinks:            ptr.To(false),
					NodeSelector:                  e.NodeSelector,
					Tolerations:                   e.Tolerations,
					Affinity:                      runnerAffinity,
					PriorityClassName:             e.PriorityClassName,
					ImagePullSecrets:              slices.Clone(e.ImagePullSecrets),
					// The restricted Pod Security level: a non-root user, the runtime's
					// seccomp profile, no capabilities, no privilege escalation; and a
					// read-only root filesystem. fsGroup gives the request Secret's file to
					// the runner's group (a kubelet makes it root-owned, mode 0440).
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(user),
						RunAsGroup:     ptr.To(user),
						FSGroup:        ptr.To(user),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            runnerContainer,
						Image:           e.Image,
						ImagePullPolicy: e.ImagePullPolicy,
						Command:         command,
						Args: []string{
							"--request", jobRequestDir + "/" + tfrunner.RequestFileName,
							"--work-dir", jobWorkDir,
							"--termination-log", tfrunner.TerminationLogPath,
						},
						Env:                      env,
						EnvFrom:                  envFrom,
						Resources:                resources,
						TerminationMessagePath:   tfrunner.TerminationLogPath,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						VolumeMounts:             mounts,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: volumes,
				},
			},
		},
	}
}

// Validate checks the runner pods' extra settings, so that a mistake stops the controller at
// its start rather than failing every run: labels and annotations the API server takes and
// none of the executor's own labels, volumes and mounts that do not clash with the runner's
// own (request, work, tmp) or each other, and tofu environment variables that tofu may get.
func (e *Job) Validate() error {
	var errs []string
	own := []string{keys.LabelNodeClaim, keys.LabelNodeClaimUID, keys.LabelOperation, keys.LabelManagedBy, "job-name", "controller-uid"}
	for _, k := range slices.Sorted(maps.Keys(e.PodLabels)) {
		switch {
		case slices.Contains(own, k) || strings.HasPrefix(k, "batch.kubernetes.io/"):
			errs = append(errs, fmt.Sprintf("pod label %s is the executor's own", k))
		case len(validation.IsQualifiedName(k)) > 0:
			errs = append(errs, fmt.Sprintf("pod label %q: %s", k, strings.Join(validation.IsQualifiedName(k), "; ")))
		case len(validation.IsValidLabelValue(e.PodLabels[k])) > 0:
			errs = append(errs, fmt.Sprintf("pod label %s=%q: %s", k, e.PodLabels[k], strings.Join(validation.IsValidLabelValue(e.PodLabels[k]), "; ")))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.PodAnnotations)) {
		if msgs := validation.IsQualifiedName(strings.ToLower(k)); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("pod annotation %q: %s", k, strings.Join(msgs, "; ")))
		}
	}
	volumes := map[string]bool{requestVolume: true, workVolume: true, tmpVolume: true}
	extra := map[string]bool{}
	for _, v := range e.Volumes {
		switch {
		case volumes[v.Name]:
			errs = append(errs, fmt.Sprintf("volume %s: the name is taken (the runner's own are %s, %s and %s)", v.Name, requestVolume, workVolume, tmpVolume))
		case len(validation.IsDNS1123Label(v.Name)) > 0:
			errs = append(errs, fmt.Sprintf("volume %q: %s", v.Name, strings.Join(validation.IsDNS1123Label(v.Name), "; ")))
		}
		volumes[v.Name], extra[v.Name] = true, true
	}
	paths := map[string]bool{jobRequestDir: true, jobWorkDir: true, jobTmpDir: true, tfrunner.TerminationLogPath: true}
	for _, m := range e.VolumeMounts {
		switch {
		case !extra[m.Name]:
			errs = append(errs, fmt.Sprintf("volume mount %s names none of the extra volumes", m.Name))
		case !strings.HasPrefix(m.MountPath, "/"):
			errs = append(errs, fmt.Sprintf("volume mount %s: mount path %q is not absolute", m.Name, m.MountPath))
		case paths[m.MountPath]:
			errs = append(errs, fmt.Sprintf("volume mount %s: %s is taken (the runner uses %s, %s, %s and %s)", m.Name, m.MountPath, jobRequestDir, jobWorkDir, jobTmpDir, tfrunner.TerminationLogPath))
		}
		paths[m.MountPath] = true
	}
	names := map[string]string{}
	for _, v := range e.TofuEnv {
		if msgs := validation.IsEnvVarName(v.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("tofu environment variable %q: %s", v.Name, strings.Join(msgs, "; ")))
		}
		names[v.Name] = ""
	}
	if bad := tfexec.ProhibitedEnv(names); len(bad) > 0 {
		slices.Sort(bad)
		errs = append(errs, fmt.Sprintf("tofu environment variables that terraform-exec sets itself for every command: %s", strings.Join(bad, ", ")))
	}
	for i, from := range e.TofuEnvFrom {
		if (from.SecretRef == nil) == (from.ConfigMapRef == nil) {
			errs = append(errs, fmt.Sprintf("tofu envFrom %d: name either a Secret or a ConfigMap", i))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("runner pod settings: %s", strings.Join(errs, "; "))
	}
	return nil
}

// resources are the runner container's (Resources, or the default).
func (e *Job) resources() corev1.ResourceRequirements {
	if e.Resources != nil {
		return *e.Resources
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
}

// Placement is what the executor's runner pods ask of a node (ClusterRunners). A container
// without requests gets its limits as requests.
func (e *Job) Placement() RunnerPlacement {
	r := e.resources()
	requests := r.Requests.DeepCopy()
	if requests == nil {
		requests = corev1.ResourceList{}
	}
	for name, q := range r.Limits {
		if _, ok := requests[name]; !ok {
			requests[name] = q.DeepCopy()
		}
	}
	return RunnerPlacement{Requests: requests, NodeSelector: e.NodeSelector, Tolerations: e.Tolerations, Namespace: e.Namespace}
}

// runnerAffinity keeps runners off the nodes Karpenter manages: consolidating such a node
// would kill a run in the middle of its apply.
var runnerAffinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
	RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "karpenter.sh/nodepool", Operator: corev1.NodeSelectorOpDoesNotExist}},
	}}},
}}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Status implements Executor. LogPath is "job/<name>", what `kubectl logs` takes. Once the
// run has finished, its request Secret is deleted (the Job, and so its log, stays for
// TTLAfterFinished). A cancelled run's Job is deleted in the foreground: it stays, marked
// for deletion, until its pod is gone, and Status reports RunStopping meanwhile.
func (e *Job) Status(ctx context.Context, name, claimUID string) (RunStatus, error) {
	if tfrunner.ValidateName(name) != nil {
		return RunStatus{}, fmt.Errorf("run %q: %w", name, ErrRunNotFound)
	}
	job, err := e.statusJob(ctx, name)
	if err != nil {
		return RunStatus{}, err
	}
	if err := CheckOwner(name, job.Labels, claimUID); err != nil {
		return RunStatus{}, err
	}
	st := RunStatus{Name: name, Phase: RunPending, LogPath: "job/" + name, StartTime: job.CreationTimestamp.UTC()}
	pods, err := e.pods(ctx, job)
	if err != nil {
		return st, err
	}
	if st.Result = jobResult(job, pods); st.Result != nil {
		st.Phase = RunFailed
		if st.Result.Succeeded {
			st.Phase = RunSucceeded
		}
		return st, e.deleteRequest(ctx, job)
	}
	if job.DeletionTimestamp != nil {
		if !runnersEnded(pods) {
			st.Phase = RunStopping
			return st, nil
		}
		now := time.Now().UTC()
		st.Phase, st.Result = RunFailed, &tfrunner.Result{Operation: tfrunner.Operation(job.Labels[keys.LabelOperation]), Started: st.StartTime, Finished: now,
			Error: tfrunner.NewRunError(tfrunner.Cancelled, "run cancelled")}
		return st, nil
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			st.Phase = RunRunning
			st.EndReported = e.cache != nil && e.OnEnd != nil
		}
	}
	return st, nil
}

// statusJob is the named Job for Status: from the cache, or, when the cache does not have
// it (one created a moment ago), from the API server, which alone may say the run is gone.
func (e *Job) statusJob(ctx context.Context, name string) (*batchv1.Job, error) {
	if e.cache != nil {
		// One the cache does not have may have been created a moment ago: the API server says.
		if job, found, fresh, err := e.cache.job(name); found && fresh || err != nil {
			return job, err
		}
	}
	job, err := e.Client.BatchV1().Jobs(e.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("run %s: %w", name, ErrRunNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Job %s: %w", name, err)
	}
	return job, nil
}

// jobResult is the result of a finished run: the one its runner wrote, or why it has none.
func jobResult(job *batchv1.Job, pods []*corev1.Pod) *tfrunner.Result {
	op := tfrunner.Operation(job.Labels[keys.LabelOperation])
	deadline := jobCondition(job, "DeadlineExceeded")
	// A runner that wrote its result decides, even before the Job controller has noticed;
	// but a runner stopped by the Job's deadline reports Cancelled where Timeout is meant.
	for _, p := range pods {
		if res, ok := podResult(p); ok {
			if res.Error != nil && res.Error.Class == tfrunner.Cancelled {
				if why, passed := deadlinePassed(job, deadline, res.Finished); passed {
					res.Error = tfrunner.NewRunError(tfrunner.Timeout, "the run's deadline passed: "+why)
				}
			}
			return &res
		}
	}
	if cond, done := jobFinished(job); done {
		return &tfrunner.Result{Operation: op, Started: job.CreationTimestamp.UTC(), Finished: cond.LastTransitionTime.UTC(), Error: lostRunError(job, cond, deadline, pods)}
	}
	return nil
}

// deadlinePassed reports whether the Job's deadline had passed when its runner finished:
// its DeadlineExceeded condition, or, before the Job controller has set that, the Job's
// activeDeadlineSeconds counted from its start.
func deadlinePassed(job *batchv1.Job, deadline *batchv1.JobCondition, finished time.Time) (string, bool) {
	if deadline != nil {
		return deadline.Message, true
	}
	limit, started := job.Spec.ActiveDeadlineSeconds, job.Status.StartTime
	if limit == nil || started == nil || finished.Before(started.Add(time.Duration(*limit)*time.Second)) {
		return "", false
	}
	return fmt.Sprintf("the Job was active longer than its %ds", *limit), true
}

// deleteRequest deletes a finished run's request Secret, which holds the claim's user data
// and credentials.
func (e *Job) deleteRequest(ctx context.Context, job *batchv1.Job) error {
	err := e.Client.CoreV1().Secrets(e.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting request Secret %s: %w", job.Name, err)
	}
	return nil
}

// pods lists the pods of this Job (not of an earlier Job of the same name), newest first.
func (e *Job) pods(ctx context.Context, job *batchv1.Job) ([]*corev1.Pod, error) {
	if e.cache != nil {
		pods, err := e.cache.podsOf(job)
		sortNewestFirst(pods)
		return pods, err
	}
	list, err := e.Client.CoreV1().Pods(e.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{jobNameLabel: job.Name, controllerUIDLabel: string(job.UID)}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods of Job %s: %w", job.Name, err)
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	sortNewestFirst(pods)
	return pods, nil
}

func sortNewestFirst(pods []*corev1.Pod) {
	sort.Slice(pods, func(i, j int) bool { return pods[j].CreationTimestamp.Before(&pods[i].CreationTimestamp) })
}

// runnerState is the runner container's terminated state, if it has ended.
func runnerState(p *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == runnerContainer && cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

// podResult parses the result the runner left as its termination message.
func podResult(p *corev1.Pod) (tfrunner.Result, bool) {
	t := runnerState(p)
	if t == nil || t.Message == "" {
		return tfrunner.Result{}, false
	}
	var res tfrunner.Result
	if err := json.Unmarshal([]byte(t.Message), &res); err != nil || res.Started.IsZero() {
		return tfrunner.Result{}, false
	}
	return res, true
}

// jobFinished returns the Job's Complete or Failed condition once it has one.
func jobFinished(job *batchv1.Job) (*batchv1.JobCondition, bool) {
	for i, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return &job.Status.Conditions[i], true
		}
	}
	return nil, false
}

// jobCondition returns a true Failed or FailureTarget condition with reason.
func jobCondition(job *batchv1.Job, reason string) *batchv1.JobCondition {
	for i, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobFailureTarget) && c.Status == corev1.ConditionTrue && c.Reason == reason {
			return &job.Status.Conditions[i]
		}
	}
	return nil
}

// lostRunError explains a finished Job whose runner left no result: its deadline passed, its
// pod was evicted or OOM-killed, or it exited (or vanished) for another reason.
func lostRunError(job *batchv1.Job, finished, deadline *batchv1.JobCondition, pods []*corev1.Pod) *tfrunner.RunError {
	if deadline != nil {
		return tfrunner.NewRunError(tfrunner.Timeout, "the run's deadline passed: "+deadline.Message)
	}
	for _, p := range pods {
		if p.Status.Reason != "" {
			return tfrunner.NewRunError(tfrunner.Unknown, fmt.Sprintf("runner pod %s: %s: %s", p.Name, p.Status.Reason, p.Status.Message))
		}
		if t := runnerState(p); t != nil {
			msg := fmt.Sprintf("runner exited with code %d (%s) without a result", t.ExitCode, t.Reason)
			if t.Reason == "OOMKilled" {
				msg = "runner was killed for using more memory than its limit (OOMKilled)"
			}
			return tfrunner.NewRunError(tfrunner.Unknown, msg)
		}
	}
	if job.Status.Succeeded > 0 || finished.Type == batchv1.JobComplete {
		return tfrunner.NewRunError(tfrunner.Unknown, "runner exited without a result")
	}
	return tfrunner.NewRunError(tfrunner.Unknown, fmt.Sprintf("runner Job failed without a result: %s: %s", finished.Reason, finished.Message))
}

// Cancel implements Executor: it deletes the Job in the foreground and returns. The Job's pod
// is deleted gracefully, so the runner gets SIGTERM, interrupts tofu and waits for it to
// release its lock, within the pod's grace period; the request Secret goes with the Job.
// Meanwhile Status reports RunStopping; once the pod is gone, so is the Job, and Status
// reports ErrRunNotFound, like a run never started. Cancelling a finished run does nothing, so
// its log stays readable.
func (e *Job) Cancel(ctx context.Context, name, claimUID string) error {
	if tfrunner.ValidateName(name) != nil {
		return fmt.Errorf("run %q: %w", name, ErrRunNotFound)
	}
	jobs := e.Client.BatchV1().Jobs(e.Namespace)
	job, err := jobs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("run %s: %w", name, ErrRunNotFound)
	}
	if err != nil {
		return fmt.Errorf("reading Job %s: %w", name, err)
	}
	if err := CheckOwner(name, job.Labels, claimUID); err != nil {
		return err
	}
	if _, done := jobFinished(job); done || job.DeletionTimestamp != nil {
		return nil
	}
	err = jobs.Delete(ctx, name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground),
		Preconditions:     &metav1.Preconditions{UID: &job.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Job %s: %w", name, err)
	}
	if e.cache != nil {
		e.cache.wrote(name, true)
	}
	return nil
}

// runnersEnded reports whether no pod of a deleted Job runs its runner any more.
func runnersEnded(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if runnerState(p) == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed &&
			(p.Spec.NodeName != "" || p.DeletionTimestamp == nil) {
			return false
		}
	}
	return true
}

// LogTail implements LogTailer: the end of the log of the run's newest runner pod, as
// `kubectl logs --tail` reads it.
func (e *Job) LogTail(ctx context.Context, name, claimUID string) ([]byte, error) {
	if tfrunner.ValidateName(name) != nil {
		return nil, fmt.Errorf("run %q: %w", name, ErrRunNotFound)
	}
	job, err := e.statusJob(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := CheckOwner(name, job.Labels, claimUID); err != nil {
		return nil, err
	}
	pods, err := e.pods(ctx, job)
	if err != nil {
		return nil, err
	}
	if len(pods) == 0 {
		return nil, fmt.Errorf("log of run %s: no runner pod: %w", name, ErrRunNotFound)
	}
	data, err := e.Client.CoreV1().Pods(e.Namespace).GetLogs(pods[0].Name, &corev1.PodLogOptions{
		Container: runnerContainer, TailLines: ptr.To(int64(tfrunner.LogTailLines)), LimitBytes: ptr.To(int64(tfrunner.LogTailBytes)),
	}).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("log of run %s: %w", name, ErrRunNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading log of run %s (pod %s): %w", name, pods[0].Name, err)
	}
	return data, nil
}
