// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// behindFor is how long the cache is taken to be behind a write of the executor's own that it
// does not show yet: far longer than a watch event takes, short enough that a Job deleted
// before the cache saw it does not hold a slot for long.
const behindFor = time.Minute

// jobCache is what StartCache watches: the executor's Jobs and their pods in its namespace
// (labelled managed-by fulfiller), so that admitting a run and polling one read memory
// instead of the API server. Until the cache shows the executor's own writes, a Job it
// created counts as in progress (a burst is not admitted past its bounds while the watch
// catches up) and is read from the API server, as is a Job it cancelled: a caller sees
// what it just did.
type jobCache struct {
	jobs batchlisters.JobNamespaceLister
	pods corelisters.PodNamespaceLister

	mu     sync.Mutex
	behind map[string]write
}

// write is one of the executor's writes of a Job that the cache may not show yet.
type write struct {
	at        time.Time
	cancelled bool // deleted, not created
}

// shows reports whether job, as the cache has it (nil: it has none), shows the write.
func (w write) shows(job *batchv1.Job) bool {
	if w.cancelled {
		return job == nil || job.DeletionTimestamp != nil
	}
	return job != nil
}

// StartCache makes the executor read its Jobs and their pods from a watch of Namespace
// instead of listing them at each Start and reading them at each Status: the Limiter's lock
// is then held over memory reads only, and a claim waiting for a runner or polling its run
// costs no request. It returns once the cache has synced; the watch ends with ctx. Without
// it every read goes to the API server.
func (e *Job) StartCache(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(e.Client, 0, informers.WithNamespace(e.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{keys.LabelManagedBy: keys.ManagedBy}).String()
		}))
	jobs := factory.Batch().V1().Jobs()
	pods := factory.Core().V1().Pods()
	c := &jobCache{jobs: jobs.Lister().Jobs(e.Namespace), pods: pods.Lister().Pods(e.Namespace), behind: map[string]write{}}
	jobsInformer, podsInformer := jobs.Informer(), pods.Informer()
	if e.OnEnd != nil {
		if err := reportEnds(jobsInformer, podsInformer, e.OnEnd); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), jobsInformer.HasSynced, podsInformer.HasSynced) {
		return errors.New("the runner Jobs' cache did not sync")
	}
	e.cache = c
	return nil
}

// job is the named Job from the cache; found is false when the cache does not have it. fresh
// is false while the cache is behind a write of the executor's own to it: then only the API
// server knows.
func (c *jobCache) job(name string) (job *batchv1.Job, found, fresh bool, err error) {
	job, err = c.jobs.Get(name)
	switch {
	case apierrors.IsNotFound(err):
		job, err = nil, nil
	case err != nil:
		return nil, false, false, fmt.Errorf("reading Job %s from the cache: %w", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return job, job != nil, c.caughtUp(name, job), nil
}

// caughtUp reports whether the cache, which has job (nil: none) of the name, shows the
// executor's last write to it, and forgets the write once it does. Called with mu held.
func (c *jobCache) caughtUp(name string, job *batchv1.Job) bool {
	w, ok := c.behind[name]
	if !ok {
		return true
	}
	if w.shows(job) || time.Since(w.at) > behindFor {
		delete(c.behind, name)
		return true
	}
	return false
}

// wrote records a write of the executor's own to the named Job: created, or cancelled.
func (c *jobCache) wrote(name string, cancelled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.behind[name] = write{at: time.Now(), cancelled: cancelled}
}

// inProgress are the executor's Jobs that have not finished, by name: those in the cache and
// those it created that the cache does not show yet.
func (c *jobCache) inProgress() (map[string]bool, error) {
	list, err := c.jobs.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing runner Jobs from the cache: %w", err)
	}
	names := map[string]bool{}
	cached := map[string]*batchv1.Job{}
	for _, job := range list {
		cached[job.Name] = job
		if _, done := jobFinished(job); !done && job.DeletionTimestamp == nil {
			names[job.Name] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, w := range c.behind {
		if !c.caughtUp(name, cached[name]) && !w.cancelled {
			names[name] = true
		}
	}
	return names, nil
}

// podsOf are the cached pods of this Job (not of an earlier Job of the same name).
func (c *jobCache) podsOf(job *batchv1.Job) ([]*corev1.Pod, error) {
	pods, err := c.pods.List(labels.SelectorFromSet(labels.Set{jobNameLabel: job.Name, controllerUIDLabel: string(job.UID)}))
	if err != nil {
		return nil, fmt.Errorf("listing pods of Job %s from the cache: %w", job.Name, err)
	}
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.DeepCopy())
	}
	return out, nil
}

// reportEnds calls onEnd for each run whose end the watch sees: its runner container ended
// (its result is written), its Job finished, or its Job went away.
func reportEnds(jobs, pods cache.SharedIndexInformer, onEnd func(name string, labels map[string]string)) error {
	if _, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, okOld := oldObj.(*batchv1.Job)
			job, okNew := newObj.(*batchv1.Job)
			if !okOld || !okNew {
				return
			}
			_, wasDone := jobFinished(old)
			if _, done := jobFinished(job); done && !wasDone {
				onEnd(job.Name, job.Labels)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if job, ok := obj.(*batchv1.Job); ok {
				onEnd(job.Name, job.Labels)
			}
		},
	}); err != nil {
		return fmt.Errorf("watching runner Jobs: %w", err)
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, okOld := oldObj.(*corev1.Pod)
			pod, okNew := newObj.(*corev1.Pod)
			if okOld && okNew && runnerState(old) == nil && runnerState(pod) != nil && pod.Labels[jobNameLabel] != "" {
				onEnd(pod.Labels[jobNameLabel], pod.Labels)
			}
		},
	}); err != nil {
		return fmt.Errorf("watching runner pods: %w", err)
	}
	return nil
}
