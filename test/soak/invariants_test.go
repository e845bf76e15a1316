// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package soak

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
)

// Bounds of the invariants.
const (
	// tokenGrace: a joined claim's bootstrap token is deleted when the controller sees the
	// registration; a controller killed just then sees it after its restart.
	tokenGrace = time.Minute
	// recoveryInterval: a lock left by a killed runner is released before the claim's next
	// run starts — after the failed run's retry backoff (at most 6 s here), or the destroy of
	// a claim deleted meanwhile — and a run waiting for a lock looks again every 10 s. A
	// minute covers that and a controller restart.
	recoveryInterval = time.Minute
	// deadlineGrace: past a phase's deadline the controller acts (interrupts the run, fails
	// the claim); it has this long to show it.
	deadlineGrace = time.Minute
	// pendingDeadline: a claim whose first run has not started. Nothing here holds one back
	// (no run limit is reached, no lock is foreign), so it is a bound on the controller.
	pendingDeadline = 3 * time.Minute
	// destroyDeadline is the controller's default destroy deadline.
	destroyDeadline = 30 * time.Minute
)

type violation struct {
	at         time.Duration // since the start of the soak
	kind, what string
}

// report is what a soak did and found; every method may be called from any goroutine.
type report struct {
	mu         sync.Mutex
	start      time.Time
	seed       uint64
	duration   time.Duration
	churned    time.Duration
	drained    time.Duration
	faults     map[string]int
	skipped    map[string]int
	checks     int
	violations []violation
	seen       map[string]bool // violations already recorded, by kind and object
	log        []string
}

func (r *report) since() time.Duration {
	if r.start.IsZero() {
		r.start = time.Now()
	}
	return time.Since(r.start).Round(time.Second)
}

func (r *report) fault(kind, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults[kind]++
	r.log = append(r.log, fmt.Sprintf("%8s  %-17s %s", r.since(), kind, detail))
}

func (r *report) skip(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped[kind]++
}

func (r *report) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf("%8s  ", r.since())+fmt.Sprintf(format, args...))
}

// violate records a violation once per kind and object (key); later sightings of the same
// one are not counted again.
func (r *report) violate(kind, key, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if key != "" {
		if r.seen[kind+"/"+key] {
			return
		}
		r.seen[kind+"/"+key] = true
	}
	v := violation{at: r.since(), kind: kind, what: what}
	r.violations = append(r.violations, v)
	r.log = append(r.log, fmt.Sprintf("%8s  VIOLATION %s: %s", v.at, kind, what))
}

func (r *report) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "soak report (%s)\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "  seed          %d (SOAK_SEED=%d replays its choices)\n", r.seed, r.seed)
	fmt.Fprintf(&b, "  churn         %s (asked %s); scale to zero drained in %s\n", r.churned.Round(time.Second), r.duration, r.drained.Round(time.Second))
	kinds := make([]string, 0, len(faultKinds))
	total := 0
	for _, f := range faultKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", f.kind, r.faults[f.kind]))
		total += r.faults[f.kind]
	}
	fmt.Fprintf(&b, "  faults        %d: %s\n", total, strings.Join(kinds, ", "))
	var skipped []string
	for _, f := range faultKinds {
		if n := r.skipped[f.kind]; n > 0 {
			skipped = append(skipped, fmt.Sprintf("%s %d", f.kind, n))
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(&b, "  no target     %s (drawn when there was nothing to do it to)\n", strings.Join(skipped, ", "))
	}
	fmt.Fprintf(&b, "  checks        %d (every %s, and one after the scale to zero)\n", r.checks, checkEvery)
	fmt.Fprintf(&b, "  violations    %d\n", len(r.violations))
	for _, v := range r.violations {
		fmt.Fprintf(&b, "    %8s  %s: %s\n", v.at, v.kind, v.what)
	}
	b.WriteString("  events\n")
	for _, l := range r.log {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// checker checks the invariants; it remembers what must last a while to be a violation.
type checker struct {
	rep *report
	// deadLock: when a lock was first seen held by a runner that is gone, by lock ID.
	deadLock map[string]time.Time
	// orphan: machines and states seen without a claim at the previous check.
	orphanMachine, orphanState map[string]bool
	// suspectState: claims whose state did not record their machine at the previous check.
	suspectState map[string]bool
}

func newChecker(rep *report) *checker {
	rep.mu.Lock()
	rep.since()
	rep.mu.Unlock()
	return &checker{rep: rep, deadLock: map[string]time.Time{}, orphanMachine: map[string]bool{}, orphanState: map[string]bool{}, suspectState: map[string]bool{}}
}

// snapshot is what one check reads. Fulfillments are listed before and after the rest, so
// that an object created or removed meanwhile is not taken for a leak or a loss.
type snapshot struct {
	before, after map[string]*v1alpha1.Fulfillment
	machines      map[string]bool
	states        map[string]*corev1.Secret // by state key
	leases        []coordinationv1.Lease
	tokens        []corev1.Secret
}

func read(ctx context.Context) (*snapshot, error) {
	s := &snapshot{machines: map[string]bool{}, states: map[string]*corev1.Secret{}}
	var err error
	if s.before, err = fulfillments(ctx); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(env.vars["SIM_DIR"])
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		s.machines[e.Name()] = true
	}
	secrets := &corev1.SecretList{}
	if err := env.kube.List(ctx, secrets, client.InNamespace(devenv.StateNamespace), client.MatchingLabels{"tfstate": "true"}); err != nil {
		return nil, err
	}
	for i := range secrets.Items {
		sec := &secrets.Items[i]
		s.states[strings.TrimPrefix(sec.Name, "tfstate-"+statelock.Workspace+"-")] = sec
	}
	leases := &coordinationv1.LeaseList{}
	if err := env.kube.List(ctx, leases, client.InNamespace(devenv.StateNamespace)); err != nil {
		return nil, err
	}
	s.leases = leases.Items
	tokens := &corev1.SecretList{}
	if err := env.kube.List(ctx, tokens, client.InNamespace("kube-system"), client.HasLabels{keys.LabelNodeClaim}); err != nil {
		return nil, err
	}
	s.tokens = tokens.Items
	if s.after, err = fulfillments(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func fulfillments(ctx context.Context) (map[string]*v1alpha1.Fulfillment, error) {
	list := &v1alpha1.FulfillmentList{}
	if err := env.kube.List(ctx, list); err != nil {
		return nil, err
	}
	out := make(map[string]*v1alpha1.Fulfillment, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// settled reports whether a claim is at rest with a machine: applied, no run in progress,
// not being deleted, and unchanged between the two reads of a check.
func (s *snapshot) settled(name string) bool {
	a, b := s.before[name], s.after[name]
	if a == nil || b == nil || a.ResourceVersion != b.ResourceVersion || !b.DeletionTimestamp.IsZero() {
		return false
	}
	if !b.StatusConditions().IsTrue(v1alpha1.ConditionApplied) {
		return false
	}
	for _, r := range b.Status.Runs {
		if r.Phase == v1alpha1.RunRunning {
			return false
		}
	}
	return true
}

// quiet reports whether no run of a claim is in progress in either read.
func (s *snapshot) quiet(name string) bool {
	for _, f := range []*v1alpha1.Fulfillment{s.before[name], s.after[name]} {
		if f == nil {
			return false
		}
		for _, r := range f.Status.Runs {
			if r.Phase == v1alpha1.RunRunning {
				return false
			}
		}
	}
	return s.before[name].ResourceVersion == s.after[name].ResourceVersion
}

func (s *snapshot) byNode(node string) *v1alpha1.Fulfillment {
	for _, f := range s.after {
		if f.Spec.NodeName == node {
			return f
		}
	}
	return nil
}

func (s *snapshot) byStateKey(key string) *v1alpha1.Fulfillment {
	for _, f := range s.after {
		if f.Spec.StateKey == key {
			return f
		}
	}
	return nil
}

func (c *checker) check(ctx context.Context) {
	s, err := read(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.rep.logf("check: reading the cluster: %v", err)
		}
		return
	}
	c.rep.mu.Lock()
	c.rep.checks++
	c.rep.mu.Unlock()
	now := time.Now()
	c.machines(s)
	c.states(s)
	c.tokens(s, now)
	c.locks(ctx, s, now)
	c.deadlines(s, now)
}

// machines: every settled claim has its machine, and every machine a claim. A machine
// without a claim must be seen at two checks in a row (and still exist) to count.
func (c *checker) machines(s *snapshot) {
	for name, f := range s.after {
		if s.settled(name) && !s.machines[f.Spec.NodeName] {
			c.rep.violate("machine-lost", name, fmt.Sprintf("claim %s is applied (phase %s) and runs nothing, but has no machine", name, f.Status.Phase))
		}
	}
	orphans := map[string]bool{}
	for m := range s.machines {
		if s.byNode(m) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(env.vars["SIM_DIR"], m)); err != nil {
			continue
		}
		orphans[m] = true
		if c.orphanMachine[m] {
			c.rep.violate("machine-leaked", m, fmt.Sprintf("machine %s has had no claim for two checks", m))
		}
	}
	c.orphanMachine = orphans
}

// states: a settled claim's state records its machine, a machine at rest has a state that
// records it, and no state outlives its claim.
func (c *checker) states(s *snapshot) {
	suspect := map[string]bool{}
	for name, f := range s.after {
		if !s.quiet(name) || !f.DeletionTimestamp.IsZero() {
			continue
		}
		sec, ok := s.states[f.Spec.StateKey]
		has := s.machines[f.Spec.NodeName]
		settled := s.settled(name)
		// A claim at rest must record its machine now; one whose apply failed or was killed
		// (its retry not started yet) has two checks to get there.
		report := func(what string) {
			if settled || c.suspectState[name] {
				c.rep.violate("state-lost", name, what)
			}
			suspect[name] = true
		}
		switch {
		case settled && !ok:
			report(fmt.Sprintf("claim %s is applied (phase %s) but has no state Secret", name, f.Status.Phase))
		case has && !ok:
			report(fmt.Sprintf("claim %s has a machine and has run nothing for two checks, but has no state Secret (phase %s: %s)", name, f.Status.Phase, f.Status.Message))
		case has && ok:
			n, err := stateResources(sec)
			if err != nil {
				c.rep.violate("state-unreadable", name, fmt.Sprintf("state of %s: %v", name, err))
			} else if n == 0 {
				report(fmt.Sprintf("claim %s has a machine and has run nothing for two checks, but its state records no resource (phase %s: %s)", name, f.Status.Phase, f.Status.Message))
			}
		}
	}
	c.suspectState = suspect
	orphans := map[string]bool{}
	for key, sec := range s.states {
		if s.byStateKey(key) != nil {
			continue
		}
		if err := env.kube.Get(context.Background(), client.ObjectKeyFromObject(sec), &corev1.Secret{}); err != nil {
			continue
		}
		orphans[key] = true
		if c.orphanState[key] {
			c.rep.violate("state-leaked", key, fmt.Sprintf("state Secret %s has had no claim for two checks", sec.Name))
		}
	}
	c.orphanState = orphans
}

// stateResources counts the resource instances an OpenTofu state Secret records.
func stateResources(sec *corev1.Secret) (int, error) {
	data := sec.Data["tfstate"]
	if sec.Annotations["encoding"] == "gzip" {
		r, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return 0, err
		}
		if data, err = io.ReadAll(r); err != nil {
			return 0, err
		}
	}
	var state struct {
		Resources []struct {
			Instances []json.RawMessage `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(data, &state); err != nil {
		return 0, err
	}
	n := 0
	for _, r := range state.Resources {
		n += len(r.Instances)
	}
	return n, nil
}

// tokens: no bootstrap token outlives its claim's join by more than tokenGrace.
func (c *checker) tokens(s *snapshot, now time.Time) {
	for _, tok := range s.tokens {
		claim := tok.Labels[keys.LabelNodeClaim]
		f := s.after[claim]
		if f == nil {
			continue // the claim is gone: checked at the end (the orphan collector's work)
		}
		joined := f.StatusConditions().Get(v1alpha1.ConditionJoined)
		if joined != nil && joined.IsTrue() && now.Sub(joined.LastTransitionTime.Time) > tokenGrace {
			c.rep.violate("token-after-join", tok.Name, fmt.Sprintf("bootstrap token %s of %s exists %s after the claim joined",
				tok.Name, claim, now.Sub(joined.LastTransitionTime.Time).Round(time.Second)))
		}
	}
}

// locks: no state lock is held by a runner that is gone for longer than recoveryInterval.
// A runner pod's hostname is its run's name, which tofu records in the lock.
func (c *checker) locks(ctx context.Context, s *snapshot, now time.Time) {
	held := map[string]bool{}
	for i := range s.leases {
		lease := &s.leases[i]
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			continue
		}
		key := statelock.Key(strings.TrimPrefix(lease.Name, "lock-tfstate-"+statelock.Workspace+"-"))
		holder, err := statelock.LockHolder(ctx, env.kube, devenv.StateNamespace, key)
		if err != nil || holder == nil {
			continue
		}
		_, run, _ := strings.Cut(holder.Who, "@")
		alive, err := runnerAlive(ctx, run)
		if err != nil {
			continue
		}
		held[holder.ID] = true
		if alive {
			delete(c.deadLock, holder.ID)
			continue
		}
		first, ok := c.deadLock[holder.ID]
		if !ok {
			c.deadLock[holder.ID] = now
			continue
		}
		if now.Sub(first) > recoveryInterval {
			c.rep.violate("lock-stale", holder.ID, fmt.Sprintf("lock %s of state %s held by %s (%s), whose runner is gone, for over %s",
				holder.ID, key, holder.Who, holder.Operation, now.Sub(first).Round(time.Second)))
		}
	}
	for id := range c.deadLock {
		if !held[id] {
			delete(c.deadLock, id)
		}
	}
}

// runnerAlive reports whether a pod of the run's Job has a container that has not ended.
func runnerAlive(ctx context.Context, run string) (bool, error) {
	pods, err := env.cs.CoreV1().Pods(devenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + run})
	if err != nil {
		return false, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ended := len(p.Status.ContainerStatuses) > 0
		for _, cs := range p.Status.ContainerStatuses {
			ended = ended && cs.State.Terminated != nil
		}
		if !ended {
			return true, nil
		}
	}
	return false, nil
}

// deadlines: no run goes on past its deadline, no claim waits to join past its join
// timeout, and none waits for its first run past pendingDeadline (each with deadlineGrace).
func (c *checker) deadlines(s *snapshot, now time.Time) {
	for name, f := range s.after {
		for _, r := range f.Status.Runs {
			if r.Phase != v1alpha1.RunRunning || r.StartTime == nil {
				continue
			}
			deadline := v1alpha1.DefaultApplyDeadline
			if r.Operation == "destroy" {
				deadline = destroyDeadline
			}
			if ran := now.Sub(r.StartTime.Time); ran > deadline+deadlineGrace {
				c.rep.violate("past-deadline", r.Name, fmt.Sprintf("run %s (%s of %s) has run %s, past its deadline of %s", r.Name, r.Operation, name, ran.Round(time.Second), deadline))
			}
		}
		if !f.DeletionTimestamp.IsZero() {
			continue
		}
		conds := f.StatusConditions()
		if applied := f.Status.Stages.Applied; applied != nil && conds.IsTrue(v1alpha1.ConditionApplied) && !conds.IsTrue(v1alpha1.ConditionJoined) {
			if waited := now.Sub(applied.Time); waited > joinTimeout+deadlineGrace {
				c.rep.violate("past-deadline", name+"/join", fmt.Sprintf("claim %s applied %s ago and has not joined (phase %s), past its join timeout of %s", name, waited.Round(time.Second), f.Status.Phase, joinTimeout))
			}
		}
		if len(f.Status.Runs) == 0 {
			if waited := now.Sub(f.CreationTimestamp.Time); waited > pendingDeadline {
				c.rep.violate("past-deadline", name+"/pending", fmt.Sprintf("claim %s has started no run %s after it was created (phase %s: %s)", name, waited.Round(time.Second), f.Status.Phase, f.Status.Message))
			}
		}
	}
}

// final checks, after the scale to zero, that nothing is left: no machine, state, lock or
// token of any claim.
// Tokens of claims that are gone are collected by the orphan collector within about a
// minute: it waits up to finalWait for everything to go.
func (c *checker) final(ctx context.Context) {
	var s *snapshot
	var left []string
	err := devenv.Poll(ctx, finalWait, time.Second, "nothing to be left", func(ctx context.Context) (bool, error) {
		var err error
		if s, err = read(ctx); err != nil {
			return false, err
		}
		left = s.left()
		return len(left) == 0, nil
	})
	c.rep.mu.Lock()
	c.rep.checks++
	c.rep.mu.Unlock()
	if s == nil {
		c.rep.violate("final", "", fmt.Sprintf("reading the cluster: %v", err))
		return
	}
	for _, l := range left {
		c.rep.violate("left-after-scale-to-zero", l, l+fmt.Sprintf(" (%s after the drain)", finalWait))
	}
}

// finalWait bounds the wait for the last tokens after the scale to zero.
const finalWait = 3 * time.Minute

// left lists what is left of any claim.
func (s *snapshot) left() []string {
	var left []string
	for m := range s.machines {
		left = append(left, "machine "+m)
	}
	for _, sec := range s.states {
		left = append(left, "state Secret "+sec.Name)
	}
	for _, l := range s.leases {
		left = append(left, "lease "+l.Name)
	}
	for _, t := range s.tokens {
		left = append(left, "bootstrap token "+t.Name+" of "+t.Labels[keys.LabelNodeClaim])
	}
	for name := range s.after {
		left = append(left, "fulfillment "+name)
	}
	slices.Sort(left)
	return left
}
