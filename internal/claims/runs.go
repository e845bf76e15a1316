// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// maxRuns bounds the run history kept in a Fulfillment's status.
const maxRuns = 10

// lastRun returns the newest run of an operation.
func lastRun(f *v1alpha1.Fulfillment, op tfrunner.Operation) *v1alpha1.Run {
	for i := len(f.Status.Runs) - 1; i >= 0; i-- {
		if f.Status.Runs[i].Operation == string(op) {
			return &f.Status.Runs[i]
		}
	}
	return nil
}

// runsMade counts the runs of an operation this claim made (attempt numbers may skip names
// that an earlier claim of the same name left).
func runsMade(f *v1alpha1.Fulfillment, op tfrunner.Operation) int {
	n := 0
	for _, r := range f.Status.Runs {
		if r.Operation == string(op) {
			n++
		}
	}
	return n
}

// maxNameSkips bounds how many run names taken by an earlier claim of the same name are
// skipped.
const maxNameSkips = 20

func runCount(f *v1alpha1.Fulfillment, op tfrunner.Operation) int {
	n := 0
	for _, r := range f.Status.Runs {
		if r.Operation == string(op) {
			n = max(n, r.Attempt)
		}
	}
	return n
}

// runName is bounded (tfrunner.RunName): a claim of a long NodePool name gets a run name a
// Job may have.
func runName(f *v1alpha1.Fulfillment, op tfrunner.Operation, attempt int) string {
	return tfrunner.RunName(f.Name, op, attempt)
}

func (c *FulfillmentController) addRun(f *v1alpha1.Fulfillment, op tfrunner.Operation, attempt int) *v1alpha1.Run {
	now := metav1.NewTime(c.clock.Now())
	f.Status.Runs = append(f.Status.Runs, v1alpha1.Run{
		Name: runName(f, op, attempt), Operation: string(op), Attempt: attempt,
		Phase: v1alpha1.RunRunning, StartTime: &now,
	})
	if len(f.Status.Runs) > maxRuns {
		f.Status.Runs = f.Status.Runs[len(f.Status.Runs)-maxRuns:]
	}
	f.Status.CurrentRun = f.Status.Runs[len(f.Status.Runs)-1].Name
	return &f.Status.Runs[len(f.Status.Runs)-1]
}

// finishRun records a finished run from the executor's status. Its runner is free: the claim
// that has waited longest for one is woken.
func (c *FulfillmentController) finishRun(run *v1alpha1.Run, st executor.RunStatus) {
	c.waiters.wakeNext()
	now := metav1.NewTime(c.clock.Now())
	if st.Result != nil && !st.Result.Finished.IsZero() {
		now = metav1.NewTime(st.Result.Finished)
	}
	run.CompletionTime = &now
	run.Phase, run.Message = v1alpha1.RunSucceeded, ""
	if st.Result == nil || !st.Result.Succeeded {
		run.Phase = v1alpha1.RunFailed
		run.ErrorClass, run.Message = string(tfrunner.Unknown), "run failed without a result"
		if st.Result != nil && st.Result.Error != nil {
			run.ErrorClass, run.Message = string(st.Result.Error.Class), st.Result.Error.Message
			if at := st.Result.Error.RetryAfter; at != nil {
				run.RetryAfter = &metav1.Time{Time: *at}
			}
		}
	}
}

// backoff is the wait before attempt n+1 after n failed attempts.
func (c *FulfillmentController) backoff(attempts int) time.Duration {
	d := c.opts.RetryBackoff << max(attempts-1, 0)
	return min(d, 5*time.Minute)
}

// retryWait is how long to wait before the next attempt, 0 when it may start now: the
// backoff after the failed run, and at least until its RetryAfter (a rate limit's reset).
func (c *FulfillmentController) retryWait(run *v1alpha1.Run, attempts int) time.Duration {
	if run == nil || run.Phase != v1alpha1.RunFailed || run.CompletionTime == nil {
		return 0
	}
	until := run.CompletionTime.Add(c.backoff(attempts))
	if run.RetryAfter != nil && run.RetryAfter.After(until) {
		until = run.RetryAfter.Time
	}
	return max(until.Sub(c.clock.Now()), 0)
}

// request builds the runner request of one operation of a claim.
func (c *FulfillmentController) request(ctx context.Context, s *claimState, op tfrunner.Operation, attempt int) (tfrunner.Request, error) {
	userData := s.minted.userData
	if userData == "" && s.f.Status.UserDataSecret != "" {
		secret := &corev1.Secret{}
		err := c.apiReader.Get(ctx, client.ObjectKey{Namespace: c.opts.Namespace, Name: s.f.Status.UserDataSecret}, secret)
		switch {
		case err == nil:
			userData = string(secret.Data[UserDataKey])
		case !apierrors.IsNotFound(err) || op == tfrunner.Apply:
			return tfrunner.Request{}, fmt.Errorf("reading user data: %w", err)
		}
	}
	settings := c.runSettings(s)
	params := maps.Clone(settings.Parameters)
	if params == nil {
		params = map[string]string{}
	}
	// What the family chose for this claim (a leased machine) over the class's variables.
	maps.Copy(params, s.f.Spec.Parameters)
	labels := maps.Clone(settings.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// For the module to label its machine as this cluster's, the claim's and the class's: a
	// family's inventory finds it by them, and the orphan collector proves it ours.
	labels[v1alpha1.LabelNodeClaim] = s.f.Name
	labels[v1alpha1.LabelNodeClass] = s.f.Spec.NodeClass
	if c.opts.ClusterName != "" {
		labels[v1alpha1.LabelCluster] = c.opts.ClusterName
	}
	backend, workspace, backendEnv, err := c.runBackend(ctx, s)
	if err != nil {
		return tfrunner.Request{}, err
	}
	credentials, err := readCredentials(ctx, c.apiReader, c.opts.Namespace, settings.Credentials)
	if err != nil {
		return tfrunner.Request{}, err
	}
	env := maps.Clone(c.opts.RunEnv)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, credentials)
	maps.Copy(env, backendEnv)
	// Every run is bounded: the runner interrupts tofu at the deadline (it releases its lock)
	// and the run fails with class Timeout.
	deadline := c.opts.DestroyDeadline
	if op == tfrunner.Apply {
		deadline = settings.ApplyDeadlineOrDefault()
	}
	return tfrunner.Request{
		Deadline:  deadline,
		Name:      runName(s.f, op, attempt),
		Operation: op,
		Family:    familyName(s),
		ModuleDir: s.f.Spec.Module,
		Backend:   backend,
		Workspace: workspace,
		Variables: map[string]any{
			tfrunner.VarNodeName:   s.f.Spec.NodeName,
			tfrunner.VarNodeType:   s.f.Spec.NodeType,
			tfrunner.VarZone:       s.f.Spec.Zone,
			tfrunner.VarUserData:   userData,
			tfrunner.VarLabels:     labels,
			tfrunner.VarParameters: params,
		},
		Env:                 env,
		TofuPath:            c.opts.TofuPath,
		TofuStartsProviders: c.opts.TofuStartsProviders,
		// The runner Job and its pod carry the claim's name: kubectl get jobs -l karpenter.sh/nodeclaim=<claim>;
		// and its UID, so that an earlier claim's run of the same name is never taken for this one's.
		Labels:      map[string]string{tfrunner.LabelNodeClaim: s.f.Name, tfrunner.LabelNodeClaimUID: s.f.Spec.NodeClaimUID},
		LockTimeout: 30 * time.Second,
	}, nil
}

// familyName is the node-type family of the claim's class, whose error rules classify its
// runs (generic when the class is gone).
func familyName(s *claimState) string {
	if s.nc != nil {
		return s.nc.Spec.Family
	}
	return ""
}

// stateNamespace is where the claim's state lives (kubernetes backend): the backend namespace
// the claim recorded (its class's, or the controller's state namespace).
func (c *FulfillmentController) stateNamespace(s *claimState) string {
	if ns := c.runSettings(s).Backend.Namespace; ns != "" {
		return ns
	}
	return c.defaultStateNamespace()
}
