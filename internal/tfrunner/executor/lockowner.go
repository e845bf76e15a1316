// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fulfiller-sh/fulfiller/internal/proc"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// LockOwner is what a state lock records about whoever took it (OpenTofu's LockInfo).
type LockOwner struct {
	// Who is "user@hostname" of the tofu process.
	Who string
	// Created is when the lock was taken.
	Created time.Time
}

// Host is the hostname part of Who.
func (o LockOwner) Host() string {
	_, host, _ := strings.Cut(o.Who, "@")
	return host
}

// Attribution says which run took a lock and whether its runner is provably gone.
type Attribution struct {
	// Run took the lock; empty when none of the runs asked about did (the lock is someone
	// else's and must not be broken).
	Run string
	// Gone is true only when the runner and everything it started have ended.
	Gone bool
	// Detail says how that was decided, for events and conditions.
	Detail string
}

// LockAttributor is implemented by executors that can tell which of their runs took a state
// lock, so that a lock left by a killed runner can be recovered.
type LockAttributor interface {
	AttributeLock(ctx context.Context, owner LockOwner, runs []string) (Attribution, error)
}

var (
	_ LockAttributor = (*Local)(nil)
	_ LockAttributor = (*Job)(nil)
)

// AttributeLock implements LockAttributor for runner pods: tofu records its hostname, and a
// runner pod's hostname is its run's name (the Job's pod template sets it: the Job controller
// cuts long Job names short in pod names). A lock taken by a pod made before that, whose
// hostname is its pod's name, is attributed by the pod's batch.kubernetes.io/job-name label
// while the pod exists. A runner is gone when no pod of its Job's name is left that has not
// terminated (the container runtime kills whatever a container left behind).
func (e *Job) AttributeLock(ctx context.Context, owner LockOwner, runs []string) (Attribution, error) {
	host := owner.Host()
	run := ""
	if slices.Contains(runs, host) {
		run = host
	} else if tfrunner.ValidateName(host) == nil {
		pod, err := e.Client.CoreV1().Pods(e.Namespace).Get(ctx, host, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return Attribution{}, fmt.Errorf("reading runner pod %s: %w", host, err)
		case slices.Contains(runs, pod.Labels[jobNameLabel]):
			run = pod.Labels[jobNameLabel]
		}
	}
	if run == "" {
		return Attribution{}, nil
	}
	pods, err := e.Client.CoreV1().Pods(e.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{jobNameLabel: run}).String(),
	})
	if err != nil {
		return Attribution{}, fmt.Errorf("listing runner pods of run %s: %w", run, err)
	}
	var ended []string
	for i := range pods.Items {
		pod := &pods.Items[i]
		if runnerState(pod) == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			return Attribution{Run: run, Detail: fmt.Sprintf("runner pod %s of run %s is running", pod.Name, run)}, nil
		}
		ended = append(ended, pod.Name)
	}
	if len(ended) == 0 {
		return Attribution{Run: run, Gone: true, Detail: fmt.Sprintf("no runner pod of run %s exists any more", run)}, nil
	}
	return Attribution{Run: run, Gone: true, Detail: fmt.Sprintf("runner pod %s of run %s has terminated", strings.Join(ended, ", "), run)}, nil
}

// AttributeLock implements LockAttributor for local runs: tofu records this machine's
// hostname, and a run took the lock when it was taken while the run went on (between its
// pid file and its last write). A runner is gone when no process of its session is left
// (tofu under a killed runner would still hold the lock).
func (e *Local) AttributeLock(_ context.Context, owner LockOwner, runs []string) (Attribution, error) {
	self, err := os.Hostname()
	if err != nil || owner.Host() != self {
		return Attribution{}, nil
	}
	for _, run := range runs {
		if tfrunner.ValidateName(run) != nil {
			continue
		}
		dir := e.runDir(run)
		pid, started, ok := readPID(dir)
		if !ok {
			continue
		}
		alive := proc.SessionAlive(pid)
		ended := time.Now()
		if !alive {
			ended, err = lastWrite(dir)
			if err != nil {
				return Attribution{}, err
			}
		}
		// The pid file is written right after the runner starts; allow for clock
		// granularity on either side.
		if owner.Created.Before(started.Add(-time.Second)) || owner.Created.After(ended.Add(time.Second)) {
			continue
		}
		if alive {
			return Attribution{Run: run, Detail: fmt.Sprintf("runner of run %s (pid %d) is running", run, pid)}, nil
		}
		return Attribution{Run: run, Gone: true, Detail: fmt.Sprintf("runner of run %s (pid %d) and its processes have exited", run, pid)}, nil
	}
	return Attribution{}, nil
}

// lastWrite is the newest modification time of a run folder's own files.
func lastWrite(dir string) (time.Time, error) {
	var newest time.Time
	for _, name := range []string{PIDFileName, LogFileName, tfrunner.ResultFileName} {
		info, err := os.Stat(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("reading run folder: %w", err)
		}
		if info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	return newest, nil
}
