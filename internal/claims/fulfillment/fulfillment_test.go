// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor/fake"
)

// TestClaimLifecycle: a claim from Create to a Ready node and from Delete to a destroyed
// machine whose state is gone and whose Fulfillment lets go, each event published once and
// only after the status write that says what happened.
func TestClaimLifecycle(t *testing.T) {
	e := newEnv(t)
	claim := test.NodeClaim("sim-a1b2c", "sim", e.clock.Now())
	got := e.create(claim)
	if got.Status.ProviderID != "fake://sim-a1b2c" || got.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeOnDemand {
		t.Fatalf("create returned %+v", got)
	}

	// Bootstrap (token, user data) and the apply's start, in one reconcile.
	e.reconcile(claim.Name)
	e.expectCondition(claim.Name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, v1alpha1.ReasonApplying)
	e.expectRuns(claim.Name, "sim-a1b2c-apply-1=Running")
	e.expectEvents(v1alpha1.ReasonApplyStarted)
	req, _ := e.exec.Request("sim-a1b2c-apply-1")
	if req.Deadline != v1alpha1.DefaultApplyDeadline || req.Labels[keys.LabelNodeClaimUID] != string(claim.UID) || req.Variables[tfrunner.VarUserData] == "" {
		t.Errorf("apply request: deadline %s, labels %v", req.Deadline, req.Labels)
	}

	// The run ends: the machine exists; the Node registers; the gates open; Karpenter
	// initializes the claim.
	e.reconcile(claim.Name)
	e.expectCondition(claim.Name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
	e.expectCondition(claim.Name, v1alpha1.ConditionJoined, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingNode)
	e.expectEvents(v1alpha1.ReasonApplied)
	e.writeState(claim.Name)

	e.clock.Step(20 * time.Second)
	test.ExpectApplied(t, e.kube, test.Node("node-a", "fake://sim-a1b2c", e.clock.Now()))
	e.reconcile(claim.Name)
	e.expectCondition(claim.Name, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonJoined)
	e.expectCondition(claim.Name, v1alpha1.ConditionCNIReady, metav1.ConditionTrue, v1alpha1.ReasonGateOpen)
	// Until Karpenter initializes the claim, Initialized says what Karpenter says.
	e.expectCondition(claim.Name, v1alpha1.ConditionInitialized, metav1.ConditionUnknown, claim.StatusConditions().Get(karpv1.ConditionTypeInitialized).Reason)
	e.expectEvents(v1alpha1.ReasonJoined, v1alpha1.ConditionCNIReady)

	live := test.ExpectExists(t, e.kube, claim.DeepCopy())
	live.StatusConditions().SetTrue(karpv1.ConditionTypeInitialized)
	test.ExpectApplied(t, e.kube, live)
	e.reconcile(claim.Name)
	f := e.fulfillment(claim.Name)
	test.ExpectCondition(t, f, v1alpha1.ConditionInitialized, metav1.ConditionTrue, v1alpha1.ReasonInitialized)
	if f.Status.Phase != v1alpha1.PhaseReady || !f.StatusConditions().Root().IsTrue() || f.Status.NodeName != "node-a" {
		t.Fatalf("phase %s, Ready %+v, node %q", f.Status.Phase, f.StatusConditions().Root(), f.Status.NodeName)
	}
	e.expectEvents()
	// Nothing changes: nothing is written or published.
	writes := len(e.writes)
	e.reconcile(claim.Name)
	if len(e.writes) != writes {
		t.Errorf("a reconcile that changed nothing wrote the status")
	}

	// Delete: the destroy runs, then the state goes and the Fulfillment lets go.
	if err := e.provider.Delete(e.ctx, live); err != nil {
		t.Fatal(err)
	}
	e.reconcile(claim.Name)
	e.expectCondition(claim.Name, v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonDestroying)
	e.expectRuns(claim.Name, "sim-a1b2c-apply-1=Succeeded", "sim-a1b2c-destroy-1=Running")
	if req, _ := e.exec.Request("sim-a1b2c-destroy-1"); req.Deadline != run.DefaultDestroyDeadline {
		t.Errorf("destroy deadline %s", req.Deadline)
	}
	e.reconcile(claim.Name)
	e.expectEvents(v1alpha1.ReasonDestroyed)
	test.ExpectNotFound(t, e.kube, f, test.Secret(testNamespace, "tfstate-default-sim-a1b2c", nil), test.Secret(testNamespace, "sim-a1b2c-userdata", nil))
	if err := e.provider.Delete(e.ctx, live); !cloudprovider.IsNodeClaimNotFoundError(err) {
		t.Errorf("delete after the destroy: %v, want NodeClaimNotFound", err)
	}
	e.expectCreated("sim-a1b2c-apply-1", "sim-a1b2c-destroy-1")
}

// TestReconcile: what one claim's reconciles do in the situations the executor, the API server
// and Karpenter put it in.
func TestReconcile(t *testing.T) {
	const name = "sim-x7k2q"
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, e *env, claim *karpv1.NodeClaim)
	}{
		{"a run the executor lost is started again under its name, and recorded once", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.create(claim)
			e.reconcile(name)
			e.exec.Lose(name + "-apply-1")
			if res := e.reconcile(name); res.RequeueAfter != run.PollInterval {
				t.Errorf("requeue %s", res.RequeueAfter)
			}
			e.expectCreated(name+"-apply-1", name+"-apply-1")
			e.expectRuns(name, name+"-apply-1=Running")
			e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, v1alpha1.ReasonApplying)
			e.expectEvents(v1alpha1.ReasonApplyStarted)
			e.reconcile(name)
			e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
		}},
		{"the first reconcile mints the token and user data and starts the apply without reading them back", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.create(claim)
			e.reconcile(name)
			e.expectRuns(name, name+"-apply-1=Running")
			f := e.fulfillment(name)
			// The user data is looked for once, before it is made (an earlier reconcile whose
			// status write was lost may have made it); neither is read after.
			token, userData := "kube-system/"+bootstrapapi.BootstrapTokenSecretPrefix+f.Status.TokenID, testNamespace+"/"+f.Status.UserDataSecret
			if n, m := countOf(e.secretReads, token), countOf(e.secretReads, userData); n != 0 || m != 1 {
				t.Errorf("read the token %d times and the user data %d times (reads %v); want 0 and 1", n, m, e.secretReads)
			}
			if req, ok := e.exec.Request(name + "-apply-1"); !ok || req.Variables[tfrunner.VarUserData] == "" {
				t.Error("the apply got no user data")
			}
			// A later reconcile reads the token to see whether it is due for an extension.
			e.secretReads = nil
			e.reconcile(name)
			if !slices.Contains(e.secretReads, "kube-system/"+bootstrapapi.BootstrapTokenSecretPrefix+f.Status.TokenID) {
				t.Errorf("a later reconcile did not look at the token: reads %v", e.secretReads)
			}
		}},
		{"a run whose end the executor reports is looked at less often, for its progress", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Hold: true, Progress: "hcloud_server.this: Creating...", EndReported: true})
			e.create(claim)
			e.reconcile(name)
			if res := e.reconcile(name); res.RequeueAfter != run.ReportedPollInterval {
				t.Errorf("requeue %s, want %s", res.RequeueAfter, run.ReportedPollInterval)
			}
			c := e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, v1alpha1.ReasonApplying)
			if want := name + "-apply-1: hcloud_server.this: Creating..."; c.Message != want {
				t.Errorf("message %q, want %q", c.Message, want)
			}
		}},
		{"a run whose end nobody reports is polled", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Hold: true})
			e.create(claim)
			e.reconcile(name)
			if res := e.reconcile(name); res.RequeueAfter != run.PollInterval {
				t.Errorf("requeue %s, want %s", res.RequeueAfter, run.PollInterval)
			}
		}},
		{"an apply waits for a runner while the slots are full", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.exec.Limiter = executor.NewLimiter(executor.MaxRuns(1))
			e.exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Hold: true})
			other := test.NodeClaim("sim-other", "sim", e.clock.Now())
			e.create(other)
			e.reconcile(other.Name)
			e.create(claim)
			if res := e.reconcile(name); res.RequeueAfter != run.AdmissionRecheck {
				t.Errorf("requeue %s, want %s", res.RequeueAfter, run.AdmissionRecheck)
			}
			c := e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, v1alpha1.ReasonWaitingForRunner)
			if c.Message != "1 of 1 tofu runs in progress (FULFILLER_MAX_CONCURRENT_RUNS): waiting for a runner" {
				t.Errorf("message %q", c.Message)
			}
			e.expectRuns(name)
			if err := e.exec.Finish("sim-other-apply-1"); err != nil {
				t.Fatal(err)
			}
			// The other claim's reconcile records its run's end, which wakes this claim at
			// once, not at its recheck.
			expectNoWake(t, e.controller)
			e.reconcile(other.Name)
			expectWoken(t, e.controller, name)
			e.reconcile(name)
			e.expectRuns(name, name+"-apply-1=Running")
			// Started, it waits no more: the next run's end wakes nobody.
			if err := e.exec.Finish(name + "-apply-1"); err != nil {
				t.Fatal(err)
			}
			e.reconcile(name)
			expectNoWake(t, e.controller)
		}},
		{"an apply waits for its family's API budget, with the numbers, until it refills", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			budget := executor.NewAPIBudgets(e.clock, func(req tfrunner.Request) []executor.APIDemand {
				return []executor.APIDemand{{Budget: "the project of token 1a2b3c4d", Limit: 120, Per: time.Hour, Requests: 100}}
			})
			e.exec.Limiter = executor.NewLimiter(executor.MaxRuns(10), budget)
			other := test.NodeClaim("sim-other", "sim", e.clock.Now())
			e.create(other)
			e.reconcile(other.Name)
			e.expectRuns(other.Name, other.Name+"-apply-1=Running")
			e.create(claim)
			if res := e.reconcile(name); res.RequeueAfter != 40*time.Minute {
				t.Errorf("requeue %s, want when the budget holds a run again (40m)", res.RequeueAfter)
			}
			c := e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, v1alpha1.ReasonWaitingForAPIBudget)
			if c.Message != "the project of token 1a2b3c4d allows 120 API requests per hour; 20 are left for runs, and one apply makes about 100: enough again in 40m0s" {
				t.Errorf("message %q", c.Message)
			}
			if f := e.fulfillment(name); f.Status.Reason != v1alpha1.ReasonWaitingForAPIBudget {
				t.Errorf("reason %s", f.Status.Reason)
			}
			e.expectRuns(name)
			e.clock.Step(40 * time.Minute)
			e.reconcile(name)
			e.expectRuns(name, name+"-apply-1=Running")
			e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, v1alpha1.ReasonApplying)
		}},
		{"a destroy waits for a runner while the slots are full", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.create(claim)
			e.reconcile(name)
			e.reconcile(name)
			e.writeState(name)
			e.exec.Limiter = executor.NewLimiter(executor.MaxRuns(1))
			e.exec.ScriptOperation(tfrunner.Apply, fake.Outcome{Hold: true})
			other := test.NodeClaim("sim-other", "sim", e.clock.Now())
			e.create(other)
			e.reconcile(other.Name)
			if err := e.provider.Delete(e.ctx, claim); err != nil {
				t.Fatal(err)
			}
			e.reconcile(name)
			c := e.expectCondition(name, v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonWaitingForRunner)
			if c.Message != "1 of 1 tofu runs in progress (FULFILLER_MAX_CONCURRENT_RUNS): waiting for a runner" {
				t.Errorf("message %q", c.Message)
			}
			if f := e.fulfillment(name); f.Status.Phase != v1alpha1.PhaseDestroying || f.Status.Reason != v1alpha1.ReasonWaitingForRunner {
				t.Errorf("phase %s, reason %s", f.Status.Phase, f.Status.Reason)
			}
			e.expectRuns(name, name+"-apply-1=Succeeded")
		}},
		{"failed applies are retried with a doubling backoff, then the claim is replaced", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.exec.ScriptOperation(tfrunner.Apply, fake.Fails(tfrunner.Transient, "limit of 3600 requests per hour reached (rate_limit_exceeded)"))
			e.create(claim)
			e.reconcile(name)
			for _, step := range []struct {
				attempt int
				wait    time.Duration
			}{{1, 5 * time.Second}, {2, 10 * time.Second}} {
				res := e.reconcile(name)
				c := e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, string(tfrunner.Transient))
				if want := "limit of 3600 requests per hour reached (rate_limit_exceeded) (retrying in " + step.wait.String() + ")"; c.Message != want || res.RequeueAfter != step.wait {
					t.Errorf("attempt %d: %q, requeue %s; want %q after %s", step.attempt, c.Message, res.RequeueAfter, want, step.wait)
				}
				// Not a moment before the backoff has passed.
				e.clock.Step(step.wait - time.Second)
				if res := e.reconcile(name); res.RequeueAfter != time.Second || len(e.exec.Created()) != step.attempt {
					t.Errorf("attempt %d: started again %s early (requeue %s)", step.attempt, time.Second, res.RequeueAfter)
				}
				e.clock.Step(time.Second)
				e.reconcile(name)
			}
			e.reconcile(name)
			e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionFalse, string(tfrunner.Transient))
			e.expectRuns(name, name+"-apply-1=Failed", name+"-apply-2=Failed", name+"-apply-3=Failed")
			e.expectEvents(v1alpha1.ReasonApplyStarted, string(tfrunner.Transient), v1alpha1.ReasonApplyStarted, string(tfrunner.Transient),
				v1alpha1.ReasonApplyStarted, string(tfrunner.Transient))
			// The claim is replaced: Karpenter plans again.
			test.ExpectDeleting(t, e.kube, claim)
			if e.unavailable.IsUnavailable("small", "a", karpv1.CapacityTypeOnDemand) {
				t.Error("a transient failure marked the offering unavailable")
			}
		}},
		{"a rate-limited apply is not retried before the API's rate limit resets", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			reset := e.clock.Now().Add(90 * time.Second)
			e.exec.Script(name+"-apply-1", fake.Outcome{Error: &tfrunner.RunError{Class: tfrunner.Transient,
				Message: "limit of 3600 requests per hour reached (rate_limit_exceeded)", RetryAfter: &reset}})
			e.create(claim)
			e.reconcile(name)
			res := e.reconcile(name)
			c := e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionUnknown, string(tfrunner.Transient))
			if want := "limit of 3600 requests per hour reached (rate_limit_exceeded) (retrying in 1m30s)"; c.Message != want || res.RequeueAfter != 90*time.Second {
				t.Errorf("%q, requeue %s; want %q after 1m30s", c.Message, res.RequeueAfter, want)
			}
			if run := e.fulfillment(name).Status.Runs[0]; run.RetryAfter == nil || !run.RetryAfter.Time.Equal(reset) {
				t.Errorf("run's retryAfter = %v, want %s", run.RetryAfter, reset)
			}
			// The backoff (5s) has long passed, the reset has not: no run.
			for _, step := range []time.Duration{5 * time.Second, 84 * time.Second} {
				e.clock.Step(step)
				if res := e.reconcile(name); len(e.exec.Created()) != 1 || res.RequeueAfter != reset.Sub(e.clock.Now()) {
					t.Fatalf("%s before the reset: runs %v, requeue %s", reset.Sub(e.clock.Now()), e.exec.Created(), res.RequeueAfter)
				}
			}
			e.clock.Step(time.Second)
			e.reconcile(name)
			e.expectRuns(name, name+"-apply-1=Failed", name+"-apply-2=Running")
		}},
		{"a claim whose apply never wrote a state is let go without a destroy", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.exec.ScriptOperation(tfrunner.Apply, fake.Fails(tfrunner.Capacity, "resource_unavailable: server type small is not available in a"))
			e.create(claim)
			e.reconcile(name)
			e.reconcile(name)
			e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionFalse, string(tfrunner.Capacity))
			if !e.unavailable.IsUnavailable("small", "a", karpv1.CapacityTypeOnDemand) {
				t.Error("the offering is not marked unavailable")
			}
			if err := e.provider.Delete(e.ctx, claim); err != nil {
				t.Fatal(err)
			}
			e.reconcile(name)
			test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}})
			e.expectCreated(name + "-apply-1")
		}},
		{"a status write that conflicts publishes nothing, and the run it started is not started twice", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.create(claim)
			e.conflicts = 1
			if res := e.reconcile(name); res.RequeueAfter != 100*time.Millisecond {
				t.Errorf("requeue after a conflict %s", res.RequeueAfter)
			}
			e.expectEvents()
			e.expectRuns(name)
			e.reconcile(name)
			e.expectRuns(name, name+"-apply-1=Running")
			e.expectEvents(v1alpha1.ReasonApplyStarted)
			e.expectCreated(name + "-apply-1")
			starts := 0
			for _, c := range e.exec.Calls() {
				if c.Method == fake.MethodStart && c.Run == name+"-apply-1" && c.Err == nil {
					starts++
				}
			}
			if starts != 2 {
				t.Errorf("%d starts of the run, want 2 (the second one idempotent)", starts)
			}
		}},
		{"a stale state lock released in a reconcile whose status write conflicts is announced, once", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.exec.Script(name+"-apply-1", fake.Fails(tfrunner.Transient, "runner exited with code 137 (Error) without a result"))
			e.create(claim)
			e.reconcile(name)
			e.reconcile(name)
			e.expectRuns(name, name+"-apply-1=Failed")
			// The killed runner left its lock (the kubernetes backend's Lease, as tofu writes it).
			key := statelock.Key(e.fulfillment(name).Spec.StateKey)
			id := "0b1e5a6c-1111-2222-3333-444455556666"
			test.ExpectApplied(t, e.kube, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: key.LeaseName(), Annotations: map[string]string{
					"app.terraform.io/lock-info": `{"ID":"` + id + `","Who":"root@` + name + `-apply-1","Operation":"OperationTypeApply"}`}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &id},
			})
			e.clock.Step(5 * time.Second) // the backoff of the failed apply
			e.events.Reset()
			e.conflicts = 1
			e.reconcile(name)
			if h, err := statelock.LockHolder(e.ctx, e.kube, testNamespace, key); err != nil || h != nil {
				t.Fatalf("the stale lock is still held: %+v, %v", h, err)
			}
			if evs := e.events.Events(); len(evs) == 1 && !strings.Contains(evs[0].Message, id) {
				t.Errorf("the event does not name the lock: %q", evs[0].Message)
			}
			e.expectEvents(v1alpha1.ReasonStaleLockRecovered)
			// The next reconcile finds the lock free: the run starts, with no second release.
			e.reconcile(name)
			e.expectRuns(name, name+"-apply-1=Failed", name+"-apply-2=Running")
			e.expectEvents(v1alpha1.ReasonApplyStarted)
		}},
		{"a Fulfillment whose claim vanished is kept a moment, then destroyed", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			test.ExpectApplied(t, e.kube, test.Fulfillment(claim, e.clock.Now()))
			e.clock.Step(10 * time.Second)
			if res := e.reconcile(name); res.RequeueAfter != 5*time.Second {
				t.Errorf("requeue %s", res.RequeueAfter)
			}
			if f := e.fulfillment(name); !f.DeletionTimestamp.IsZero() {
				t.Fatal("deleted at once")
			}
			e.clock.Step(30 * time.Second)
			e.reconcile(name)
			// Nothing was applied: it goes at the next reconcile, with no run.
			e.reconcile(name)
			test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}})
			e.expectCreated()
		}},
		{"a Fulfillment of an earlier claim of the same name is destroyed, not adopted", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			test.ExpectApplied(t, e.kube, claim, test.Fulfillment(claim, e.clock.Now(), func(f *v1alpha1.Fulfillment) { f.Spec.NodeClaimUID = "uid-earlier" }))
			e.clock.Step(time.Minute)
			e.reconcile(name)
			if f := e.fulfillment(name); f.DeletionTimestamp.IsZero() {
				t.Error("the earlier claim's Fulfillment is kept")
			}
			if _, err := e.provider.Create(e.ctx, claim); err == nil {
				t.Error("create over the earlier claim's Fulfillment succeeded")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.run(t, e, test.NodeClaim(name, "sim", e.clock.Now()))
		})
	}
}

// expectWoken: the claims were woken (runWaiters), in this order, and no others.
func expectWoken(t *testing.T, c *Controller, names ...string) {
	t.Helper()
	for _, want := range names {
		select {
		case ev := <-c.runs.Wake():
			if ev.Object.GetName() != want {
				t.Fatalf("woke %s, want %s", ev.Object.GetName(), want)
			}
		default:
			t.Fatalf("%s was not woken", want)
		}
	}
	expectNoWake(t, c)
}

func expectNoWake(t *testing.T, c *Controller) {
	t.Helper()
	select {
	case ev := <-c.runs.Wake():
		t.Fatalf("woke %s", ev.Object.GetName())
	default:
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
