// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestDecideWaiting: what waiting for a node means, from the family's observation of the
// machine, the machine's own report of its boot and the time since the apply.
func TestDecideWaiting(t *testing.T) {
	const timeout = 10 * time.Minute
	unschedulable := &family.Observation{Reason: "VMUnschedulable", Message: "ErrorUnschedulable: 0/3 nodes are available", CapacityFailure: true}
	pull := &family.Observation{Reason: "VMImagePullFailed", Message: "ErrImagePull: not found"}
	installing := &v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageInstalling, Step: "install"}
	joining := &v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageJoining, Step: "join"}
	failedInstall := &v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageFailed, Step: "kubernetes-packages",
		Message: "apt_get exited with status 100 (E: Unable to locate package kubelet)"}
	running := &family.Observation{Reason: "VMRunning", Message: "the VM runs"}
	for _, tc := range []struct {
		name   string
		obs    *family.Observation
		boot   *v1alpha1.BootReportStatus
		waited time.Duration
		want   waitDecision
	}{
		{"installing", nil, installing, time.Minute, waitDecision{Reason: v1alpha1.ReasonInstalling, Message: "the machine installs its node software"}},
		{"the report says more than the family", running, joining, time.Minute, waitDecision{Reason: v1alpha1.ReasonJoining, Message: "the machine runs kubeadm join"}},
		{"a failed step fails at once", running, failedInstall, time.Minute, waitDecision{Fail: true, Reason: v1alpha1.ReasonBootstrapFailed,
			Message: "the machine's step kubernetes-packages failed: apt_get exited with status 100 (E: Unable to locate package kubelet)"}},
		{"a failed step past the timeout is still the failure", nil, failedInstall, timeout, waitDecision{Fail: true, Reason: v1alpha1.ReasonBootstrapFailed,
			Message: "the machine's step kubernetes-packages failed: apt_get exited with status 100 (E: Unable to locate package kubelet)"}},
		{"timeout after a report says where it was", unschedulable, installing, timeout, waitDecision{Fail: true, Reason: v1alpha1.ReasonJoinTimeout,
			Message: "no node registered with provider id p://n within 10m0s of the apply; the machine last reported Installing (step install)"}},
		{"gone before its report", &family.Observation{Gone: true, Message: "vm gone"}, failedInstall, time.Second, waitDecision{Fail: true, Reason: v1alpha1.ReasonMachineDeleted, Message: "vm gone"}},
		{"no watcher", nil, nil, time.Minute, waitDecision{Reason: v1alpha1.ReasonAwaitingNode, Message: "machine created, waiting for its node to register"}},
		{"no watcher, timeout", nil, nil, timeout, waitDecision{Fail: true, Reason: v1alpha1.ReasonJoinTimeout,
			Message: "no node registered with provider id p://n within 10m0s of the apply"}},
		{"the family says why", pull, nil, time.Minute, waitDecision{Reason: "VMImagePullFailed", Message: "ErrImagePull: not found"}},
		{"unschedulable before the timeout waits", unschedulable, nil, timeout - time.Second, waitDecision{Reason: "VMUnschedulable", Message: unschedulable.Message}},
		{"unschedulable at the timeout is insufficient capacity", unschedulable, nil, timeout, waitDecision{Fail: true, Reason: "VMUnschedulable",
			Message: "no node within 10m0s of the apply: ErrorUnschedulable: 0/3 nodes are available", MarkUnavailable: true}},
		{"image pull at the timeout is the family's reason, no capacity", pull, nil, timeout, waitDecision{Fail: true, Reason: "VMImagePullFailed",
			Message: "no node within 10m0s of the apply: ErrImagePull: not found"}},
		{"gone fails at once", &family.Observation{Gone: true, Message: "vm gone"}, nil, time.Second, waitDecision{Fail: true, Reason: v1alpha1.ReasonMachineDeleted, Message: "vm gone"}},
		{"not readable", &family.Observation{Message: "the machine's status cannot be read: x"}, nil, time.Minute,
			waitDecision{Reason: v1alpha1.ReasonAwaitingNode, Message: "machine created, waiting for its node to register; the machine's status cannot be read: x"}},
		{"not readable at the timeout", &family.Observation{Message: "x"}, nil, timeout, waitDecision{Fail: true, Reason: v1alpha1.ReasonJoinTimeout,
			Message: "no node registered with provider id p://n within 10m0s of the apply"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideWaiting(tc.obs, tc.boot, "p://n", tc.waited, timeout); got != tc.want {
				t.Errorf("decideWaiting() = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// watchedFamily is a family with a scripted MachineWatcher.
type watchedFamily struct {
	obs    family.Observation
	err    error
	scopes []family.Scope
}

var _ family.MachineWatcher = (*watchedFamily)(nil)

func (*watchedFamily) Name() string { return "watched" }

func (w *watchedFamily) Observe(_ context.Context, s family.Scope, _ *v1alpha1.Fulfillment) (family.Observation, error) {
	w.scopes = append(w.scopes, s)
	return w.obs, w.err
}

// watchedEnv is an env whose class "sim" is of the watched family, with credentials.
func watchedEnv(t *testing.T) (*env, *watchedFamily) {
	t.Helper()
	infra := test.Secret(testNamespace, "infra", map[string]string{"KUBE_HOST": "https://infra:6443"})
	infra.Labels = map[string]string{v1alpha1.LabelCredentials: "true"}
	e := newEnv(t, infra)
	w := &watchedFamily{}
	reg, err := family.NewRegistry(w)
	if err != nil {
		t.Fatal(err)
	}
	e.rebuild(func(o *Options) { o.Families, o.ClusterName = reg, "prod-eu" })
	nc := test.ExpectExists(t, e.kube, test.NodeClass("sim"))
	nc.Spec.Family = "watched"
	nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "infra"}}
	test.ExpectApplied(t, e.kube, nc)
	return e, w
}

// appliedClaim creates a claim and runs its apply to the end.
func appliedClaim(e *env, name string) *karpv1.NodeClaim {
	e.t.Helper()
	claim := test.NodeClaim(name, "sim", e.clock.Now())
	e.create(claim)
	e.reconcile(name)
	e.reconcile(name)
	e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
	e.writeState(name)
	e.expectEvents(v1alpha1.ReasonApplyStarted, v1alpha1.ReasonApplied)
	return claim
}

// expectReplaced checks that the claim was handed back to Karpenter (deleted).
func (e *env) expectReplaced(claim *karpv1.NodeClaim) {
	e.t.Helper()
	got := &karpv1.NodeClaim{}
	if err := e.kube.Get(e.ctx, client.ObjectKey{Name: claim.Name}, got); err == nil && got.DeletionTimestamp.IsZero() {
		e.t.Errorf("claim %s was not replaced", claim.Name)
	}
}

// TestMachineWatcher: a family's watcher says why a claim's node has not joined; a machine its
// infrastructure cannot run counts as insufficient capacity at the join timeout; a machine
// deleted behind the fulfiller's back, before or after its node joined, replaces the claim.
func TestMachineWatcher(t *testing.T) {
	const name = "sim-w1"
	t.Run("waiting, in the family's words, then joined", func(t *testing.T) {
		e, w := watchedEnv(t)
		w.obs = family.Observation{Reason: "VMScheduling", Message: "Starting: VMI Scheduling"}
		appliedClaim(e, name)
		e.clock.Step(time.Second)
		e.reconcile(name)
		c := e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionUnknown, "VMScheduling")
		if c.Message != "Starting: VMI Scheduling" {
			t.Errorf("message %q", c.Message)
		}
		if f := e.fulfillment(name); f.Status.Phase != v1alpha1.PhaseJoining || f.Status.Reason != "VMScheduling" {
			t.Errorf("phase %s, reason %s", f.Status.Phase, f.Status.Reason)
		}
		s := w.scopes[len(w.scopes)-1]
		if s.Class == nil || s.Class.Name != "sim" || s.Env["KUBE_HOST"] != "https://infra:6443" || s.Cluster != "prod-eu" {
			t.Errorf("scope %+v", s)
		}
		w.obs = family.Observation{Reason: "VMRunning", Message: "Running: the guest has not joined yet"}
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionUnknown, "VMRunning")
		e.expectEvents()
		test.ExpectApplied(t, e.kube, test.Node("node-w1", "fake://"+name, e.clock.Now()))
		res := e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonJoined)
		if res.RequeueAfter == 0 || res.RequeueAfter > machineRecheck {
			t.Errorf("a joined claim's machine is looked at again after %s", res.RequeueAfter)
		}
	})
	t.Run("unschedulable until the join timeout is insufficient capacity", func(t *testing.T) {
		e, w := watchedEnv(t)
		w.obs = family.Observation{Reason: "VMUnschedulable", Message: "ErrorUnschedulable: 0/3 nodes are available", CapacityFailure: true}
		claim := appliedClaim(e, name)
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionUnknown, "VMUnschedulable")
		if e.unavailable.IsUnavailable("small", "a", karpv1.CapacityTypeOnDemand) {
			t.Error("the offering is unavailable before the timeout")
		}
		e.clock.Step(v1alpha1.DefaultJoinTimeout)
		e.reconcile(name)
		c := e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionFalse, "VMUnschedulable")
		if c.Message != "no node within "+v1alpha1.DefaultJoinTimeout.String()+" of the apply: ErrorUnschedulable: 0/3 nodes are available" {
			t.Errorf("message %q", c.Message)
		}
		e.expectEvents("VMUnschedulable")
		if !e.unavailable.IsUnavailable("small", "a", karpv1.CapacityTypeOnDemand) {
			t.Error("the offering is still available")
		}
		e.expectReplaced(claim)
	})
	t.Run("an image that cannot be pulled is replaced at the timeout, the offering stays", func(t *testing.T) {
		e, w := watchedEnv(t)
		w.obs = family.Observation{Reason: "VMImagePullFailed", Message: "ErrImagePull: not found"}
		claim := appliedClaim(e, name)
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionUnknown, "VMImagePullFailed")
		e.clock.Step(v1alpha1.DefaultJoinTimeout)
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionFalse, "VMImagePullFailed")
		if e.unavailable.IsUnavailable("small", "a", karpv1.CapacityTypeOnDemand) {
			t.Error("an image pull failure marked the offering unavailable")
		}
		e.expectReplaced(claim)
	})
	t.Run("deleted before it joined", func(t *testing.T) {
		e, w := watchedEnv(t)
		claim := appliedClaim(e, name)
		w.obs = family.Observation{Gone: true, Message: "virtualmachine tenant/sim-w1 is gone from the infra cluster"}
		e.reconcile(name)
		c := e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonMachineDeleted)
		if c.Message != w.obs.Message {
			t.Errorf("message %q", c.Message)
		}
		e.expectEvents(v1alpha1.ReasonMachineDeleted)
		e.expectReplaced(claim)
	})
	t.Run("deleted after it joined", func(t *testing.T) {
		e, w := watchedEnv(t)
		w.obs = family.Observation{Reason: "VMRunning", Message: "Running"}
		claim := appliedClaim(e, name)
		test.ExpectApplied(t, e.kube, test.Node("node-w1", "fake://"+name, e.clock.Now()))
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonJoined)
		e.events.Reset()
		w.obs = family.Observation{Gone: true, Message: "virtualmachine tenant/sim-w1 is gone from the infra cluster"}
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonMachineDeleted)
		if f := e.fulfillment(name); f.Status.Phase != v1alpha1.PhaseFailed {
			t.Errorf("phase %s", f.Status.Phase)
		}
		e.expectEvents(v1alpha1.ReasonMachineDeleted)
		e.expectReplaced(claim)
	})
	t.Run("a family that cannot tell leaves the claim waiting", func(t *testing.T) {
		e, w := watchedEnv(t)
		w.err = errors.New("dial tcp: connection refused")
		appliedClaim(e, name)
		e.reconcile(name)
		c := e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingNode)
		if c.Message != "machine created, waiting for its node to register; the machine's status cannot be read: dial tcp: connection refused" {
			t.Errorf("message %q", c.Message)
		}
	})
}
