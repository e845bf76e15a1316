// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// machineRecheck is how often a joined claim's machine is looked at, so that one deleted
// behind the fulfiller's back is seen.
const machineRecheck = 30 * time.Second

// machineStage asks the claim's family where its created machine is (family.MachineWatcher),
// for the join stage to show why the node has not registered yet; and sees a machine deleted
// behind the fulfiller's back, also after its node joined: the claim is then replaced through
// Karpenter and its state destroyed. Families without a watcher skip it.
type machineStage struct {
	runs      *run.Runs
	apiReader client.Reader
	families  family.Registry
	// namespace holds the Secrets classes name; cluster is this cluster's name (family.Scope).
	namespace, cluster string
}

func (m *machineStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if !s.Conds.IsTrue(v1alpha1.ConditionApplied) || failed(s) {
		return reconcile.Result{}, nil
	}
	f, ok := classconfig.Family(m.families, s.Class)
	if !ok {
		return reconcile.Result{}, nil
	}
	watcher, ok := f.(family.MachineWatcher)
	if !ok {
		return reconcile.Result{}, nil
	}
	obs := m.observe(ctx, watcher, s)
	s.observed = &obs
	if !s.Conds.IsTrue(v1alpha1.ConditionJoined) {
		// The join stage decides; the machine is looked at again anyway, also once joined.
		return reconcile.Result{RequeueAfter: machineRecheck}, nil
	}
	if obs.Gone {
		s.Conds.SetFalse(v1alpha1.ConditionJoined, v1alpha1.ReasonMachineDeleted, obs.Message)
		s.Events = append(s.Events, joinFailedEvent(s.F, v1alpha1.ReasonMachineDeleted, obs.Message))
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: machineRecheck}, nil
}

// observe asks the family with the credentials the claim's runs use (recorded at Create). A
// question it cannot answer (the infra cluster does not answer, the credentials are gone) is
// an observation without a reason that says so: the claim keeps waiting, and its deadline
// still holds.
func (m *machineStage) observe(ctx context.Context, watcher family.MachineWatcher, s *claimState) family.Observation {
	env, err := classconfig.ReadCredentials(ctx, m.apiReader, m.namespace, m.runs.Settings(&s.Claim).Credentials)
	if err == nil {
		var obs family.Observation
		obs, err = watcher.Observe(ctx, family.Scope{Class: s.Class, Env: env, Cluster: m.cluster}, s.F)
		if err == nil {
			return obs
		}
	}
	log.FromContext(ctx).V(1).Info("the family could not tell where the machine is", "error", err.Error())
	return family.Observation{Message: fmt.Sprintf("the machine's status cannot be read: %v", err)}
}

// waitDecision is what the join stage does while no node has registered.
type waitDecision struct {
	// Fail turns Joined False with Reason and Message, and the claim is replaced; else
	// Joined stays Unknown with them.
	Fail            bool
	Reason, Message string
	// MarkUnavailable marks the claim's offering unavailable: its infrastructure could not
	// run the machine, so Karpenter plans onto another one.
	MarkUnavailable bool
}

// decideWaiting decides from the family's observation of the machine (nil: no watcher), the
// machine's own report of its boot (empty: none yet) and how long the claim has waited since
// its apply. A machine gone, or one that reports a failed step, fails at once; at the join
// timeout a machine its infrastructure cannot run counts as insufficient capacity; before it,
// the report, else the observation, says why the node is not there yet.
func decideWaiting(obs *family.Observation, boot *v1alpha1.BootReportStatus, providerID string, waited, timeout time.Duration) waitDecision {
	if obs != nil && obs.Gone {
		return waitDecision{Fail: true, Reason: v1alpha1.ReasonMachineDeleted, Message: obs.Message}
	}
	if boot == nil {
		boot = &v1alpha1.BootReportStatus{}
	}
	if boot.Stage == v1alpha1.BootStageFailed {
		return waitDecision{Fail: true, Reason: v1alpha1.ReasonBootstrapFailed, Message: fmt.Sprintf("the machine's step %s failed: %s", boot.Step, boot.Message)}
	}
	if waited >= timeout {
		d := waitDecision{Fail: true, Reason: v1alpha1.ReasonJoinTimeout,
			Message: fmt.Sprintf("no node registered with provider id %s within %s of the apply", providerID, timeout)}
		if boot.Stage != "" {
			d.Message += fmt.Sprintf("; the machine last reported %s (step %s)", boot.Stage, boot.Step)
		} else if obs != nil && obs.Reason != "" {
			d.Reason, d.Message = obs.Reason, fmt.Sprintf("no node within %s of the apply: %s", timeout, obs.Message)
			d.MarkUnavailable = obs.CapacityFailure
		}
		return d
	}
	switch boot.Stage {
	case v1alpha1.BootStageInstalling:
		return waitDecision{Reason: v1alpha1.ReasonInstalling, Message: "the machine installs its node software"}
	case v1alpha1.BootStageJoining:
		return waitDecision{Reason: v1alpha1.ReasonJoining, Message: "the machine runs kubeadm join"}
	}
	if obs != nil && obs.Reason != "" {
		return waitDecision{Reason: obs.Reason, Message: obs.Message}
	}
	msg := "machine created, waiting for its node to register"
	if obs != nil && obs.Message != "" {
		msg += "; " + obs.Message
	}
	return waitDecision{Reason: v1alpha1.ReasonAwaitingNode, Message: msg}
}
