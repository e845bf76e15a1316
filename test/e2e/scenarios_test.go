// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// TestScaleUpAndDown is what `make demo` does, with assertions on the real objects: pending
// pods get nodes through Karpenter, tofu and a real join; scaled to zero, consolidation
// destroys the machines and removes their states.
func TestScaleUpAndDown(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	orphan := orphanToken(t, ctx)
	startScenario(t, ctx,
		nodeClass("e2e-basic", nodeType("basic-small", "0.01", nil), nodeType("basic-large", "0.03", map[string]string{"cpu": "4"})),
		nodePool("e2e-basic", "e2e-basic"))
	create(t, ctx, deployment("basic", "e2e-basic", 4, "900m"))
	eventually(t, ctx, 4*time.Minute, "4 pods to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "basic"}, 4)
	})
	eventually(t, ctx, 2*time.Minute, "fulfillments to be Ready", func(ctx context.Context) (bool, error) {
		return devenv.FulfillmentsReady(ctx, env.kube)
	})

	ffs := fulfillments(t, ctx)
	if len(ffs) < 2 {
		t.Fatalf("%d fulfillments for 4 pods of 0.9 cpu on 2-cpu nodes, want at least 2", len(ffs))
	}
	claimList := &karpv1.NodeClaimList{}
	if err := env.kube.List(ctx, claimList); err != nil {
		t.Fatal(err)
	}
	if len(claimList.Items) != len(ffs) {
		t.Errorf("%d nodeclaims but %d fulfillments", len(claimList.Items), len(ffs))
	}
	for _, nc := range claimList.Items {
		for _, cond := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized} {
			if !nc.StatusConditions().IsTrue(cond) {
				t.Errorf("nodeclaim %s: %s is not True", nc.Name, cond)
			}
		}
		if !strings.HasPrefix(nc.Status.ProviderID, "sim://") || nc.Status.NodeName != nc.Name {
			t.Errorf("nodeclaim %s: providerID %q node %q", nc.Name, nc.Status.ProviderID, nc.Status.NodeName)
		}
		if nc.Annotations[cloudprovider.AnnotationHash] == "" {
			t.Errorf("nodeclaim %s has no drift hash", nc.Name)
		}
	}
	cs := clientset(t)
	for i := range ffs {
		f := &ffs[i]
		for _, cond := range []string{v1alpha1.ConditionApplied, v1alpha1.ConditionJoined, v1alpha1.ConditionInitialized, "Ready"} {
			if !f.StatusConditions().IsTrue(cond) {
				t.Errorf("fulfillment %s: %s is not True: %+v", f.Name, cond, f.StatusConditions().Get(cond))
			}
		}
		st := f.Status.Stages
		if st.ApplyStarted == nil || st.Applied == nil || st.Registered == nil || st.Initialized == nil {
			t.Errorf("fulfillment %s: missing stage times %+v", f.Name, st)
		}
		if f.Status.Phase != v1alpha1.PhaseReady || len(f.Status.Runs) != 1 || f.Status.Runs[0].Phase != v1alpha1.RunSucceeded {
			t.Errorf("fulfillment %s: phase %s runs %+v", f.Name, f.Status.Phase, f.Status.Runs)
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, f.Status.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node of %s: %v", f.Name, err)
		}
		if node.Spec.ProviderID != f.Status.ProviderID || node.Labels[corev1.LabelInstanceTypeStable] != f.Spec.NodeType {
			t.Errorf("node %s: providerID %q type %q", node.Name, node.Spec.ProviderID, node.Labels[corev1.LabelInstanceTypeStable])
		}
		// The token was revoked at registration and never written to the run's log.
		token := tokenOf(t, ctx, f)
		tokenID, _, _ := strings.Cut(token, ".")
		if _, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+tokenID, metav1.GetOptions{}); err == nil {
			t.Errorf("fulfillment %s: token secret still exists after join", f.Name)
		}
		// Refused at once, or within the API server's 10s cache of successful authentications.
		eventually(t, ctx, 30*time.Second, "the token of "+f.Name+" to be refused", func(ctx context.Context) (bool, error) {
			_, err := whoAmI(ctx, token)
			return apierrors.IsUnauthorized(err), nil
		})
		runLog := runLog(t, f.Status.Runs[0])
		if !strings.Contains(runLog, `"type":"apply_complete"`) {
			t.Errorf("run log of %s shows no completed apply:\n%s", f.Name, runLog)
		}
		if strings.Contains(runLog, token) || strings.Contains(runLog, strings.SplitN(token, ".", 2)[1]) {
			t.Errorf("run log of %s contains the bootstrap token", f.Name)
		}
		assertTokenNowhere(t, ctx, f, strings.SplitN(token, ".", 2)[1])
	}
	tokens, err := cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: keys.LabelNodeClaim + ",karpenter.sh/nodeclaim!=" + orphanClaim})
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens.Items) != 0 {
		t.Errorf("%d bootstrap token secrets left after every node joined", len(tokens.Items))
	}
	out := kubectl(t, "get", "fulfillments")
	for _, col := range []string{"TYPE", "PHASE", "REASON", "PROVIDERID", "RUN", "AGE"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get fulfillments lacks column %s:\n%s", col, out)
		}
	}
	if strings.Count(out, v1alpha1.PhaseReady) < len(ffs) {
		t.Errorf("kubectl get fulfillments does not show every claim Ready:\n%s", out)
	}
	assertBurstMetrics(t, ffs)

	scale(t, ctx, "basic", 0)
	eventually(t, ctx, 4*time.Minute, "consolidation to destroy every node and remove its state", func(ctx context.Context) (bool, error) {
		ok, _, err := devenv.Drained(ctx, env.kube)
		return ok, err
	})
	assertNoMachines(t)
	assertDestroyMetrics(t, "e2e-basic", len(ffs))
	eventually(t, ctx, 2*time.Minute, "the orphaned token to be collected", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, orphan, metav1.GetOptions{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	cleanup(t, "basic", "e2e-basic", "e2e-basic")
}

// TestLateBootJoinsWithExtendedToken: a machine that boots after its token's first expiry
// still joins, because the token of an unjoined claim is extended; once it registered, the
// token is refused.
func TestLateBootJoinsWithExtendedToken(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	const ttl = 20 * time.Second
	late := nodeType("late", "0.01", map[string]string{"boot_delay": "35s"})
	late.JoinTimeout = &metav1.Duration{Duration: 2 * time.Minute}
	class := nodeClass("e2e-late", late)
	class.Spec.Bootstrap.TokenTTL = metav1.Duration{Duration: ttl}
	startScenario(t, ctx, class, nodePool("e2e-late", "e2e-late"))
	create(t, ctx, deployment("late", "e2e-late", 1, "500m"))
	eventually(t, ctx, 3*time.Minute, "the pod to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "late"}, 1)
	})
	ffs := fulfillments(t, ctx)
	if len(ffs) != 1 {
		t.Fatalf("%d fulfillments, want 1", len(ffs))
	}
	f := ffs[0]
	if f.Status.Stages.Registered == nil || f.Status.Stages.ClaimCreated == nil {
		t.Fatalf("stages %+v", f.Status.Stages)
	}
	if waited := f.Status.Stages.Registered.Sub(f.Status.Stages.ClaimCreated.Time); waited <= ttl {
		t.Fatalf("node registered %s after the claim, within the token's first %s: nothing was extended", waited, ttl)
	}
	token := tokenOf(t, ctx, &f)
	eventually(t, ctx, 30*time.Second, "the token to be refused after registration", func(ctx context.Context) (bool, error) {
		_, err := whoAmI(ctx, token)
		return apierrors.IsUnauthorized(err), nil
	})
	cleanup(t, "late", "e2e-late", "e2e-late")
}

// TestInsufficientCapacityReplans: the cheapest type's apply fails with a capacity error and
// the next one's cloud rejects its input; Karpenter plans again onto the third type, and
// neither failed offering is tried again while it is marked unavailable.
func TestInsufficientCapacityReplans(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	tr := trackFulfillments(t)
	startScenario(t, ctx,
		nodeClass("e2e-ice",
			nodeType("ice-soldout", "0.01", map[string]string{"apply_error": "capacity"}),
			nodeType("ice-rejected", "0.015", map[string]string{"apply_error": "invalid"}),
			nodeType("ice-ok", "0.02", nil)),
		nodePool("e2e-ice", "e2e-ice"))
	create(t, ctx, deployment("ice", "e2e-ice", 1, "500m"))
	eventually(t, ctx, 4*time.Minute, "the pod to be bound", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "ice"}, 1)
	})
	pods := &corev1.PodList{}
	if err := env.kube.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": "ice"}); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: pods.Items[0].Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	if got := node.Labels[corev1.LabelInstanceTypeStable]; got != "ice-ok" {
		t.Errorf("pod landed on a %s node, want ice-ok", got)
	}
	soldOut := tr.byType("ice-soldout")
	if len(soldOut) != 1 {
		t.Fatalf("%d claims tried ice-soldout, want exactly 1 (the offering must be marked unavailable after the capacity error)", len(soldOut))
	}
	eventually(t, ctx, 2*time.Minute, "the failed claim to be destroyed", func(ctx context.Context) (bool, error) {
		err := env.kube.Get(ctx, client.ObjectKeyFromObject(soldOut[0]), &v1alpha1.Fulfillment{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	last := tr.byType("ice-soldout")[0]
	applied := last.StatusConditions().Get(v1alpha1.ConditionApplied)
	if applied == nil || !applied.IsFalse() || applied.Reason != "InsufficientCapacity" || !strings.Contains(applied.Message, "resource_unavailable") {
		t.Errorf("failed claim's Applied condition = %+v, want False/InsufficientCapacity naming resource_unavailable", applied)
	}
	rejected := tr.byType("ice-rejected")
	if len(rejected) != 1 {
		t.Fatalf("%d claims tried ice-rejected, want exactly 1 (a rejected input must not be retried in a loop)", len(rejected))
	}
	eventually(t, ctx, 2*time.Minute, "the rejected claim to be destroyed", func(ctx context.Context) (bool, error) {
		err := env.kube.Get(ctx, client.ObjectKeyFromObject(rejected[0]), &v1alpha1.Fulfillment{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	applied = tr.byType("ice-rejected")[0].StatusConditions().Get(v1alpha1.ConditionApplied)
	if applied == nil || !applied.IsFalse() || applied.Reason != "InvalidModule" || !strings.Contains(applied.Message, "invalid_input") {
		t.Errorf("rejected claim's Applied condition = %+v, want False/InvalidModule naming invalid_input", applied)
	}
	cleanup(t, "ice", "e2e-ice", "e2e-ice")
}

// TestNeverJoinsIsCleanedUp: a machine that never joins is replaced after the node type's join
// timeout, and its machine is destroyed, not leaked.
func TestNeverJoinsIsCleanedUp(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	tr := trackFulfillments(t)
	silent := nodeType("silent", "0.01", map[string]string{"never_join": "true"})
	silent.JoinTimeout = &metav1.Duration{Duration: 15 * time.Second}
	startScenario(t, ctx, nodeClass("e2e-silent", silent), nodePool("e2e-silent", "e2e-silent"))
	create(t, ctx, deployment("silent", "e2e-silent", 1, "500m"))
	var first *v1alpha1.Fulfillment
	eventually(t, ctx, 3*time.Minute, "a claim to time out joining and be destroyed", func(ctx context.Context) (bool, error) {
		for _, f := range tr.byType("silent") {
			joined := f.StatusConditions().Get(v1alpha1.ConditionJoined)
			if joined != nil && joined.IsFalse() && joined.Reason == v1alpha1.ReasonJoinTimeout &&
				f.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed) {
				first = f
				return true, nil
			}
		}
		return false, nil
	})
	assertMachineAndClaimGone(t, ctx, first.Name)
	cleanup(t, "silent", "e2e-silent", "e2e-silent")
}

// TestInstallFailsHalfway: on a stock image whose containerd download keeps failing, the
// machine runs the install script through its steps (each package operation taking the node
// type's package_delay), reports the failed step with its token, and the claim fails with
// BootstrapFailed naming the step and the failing line, at once rather than at its join
// timeout; its machine is destroyed, and its token and boot report go with the claim.
func TestInstallFailsHalfway(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	tr := trackFulfillments(t)
	broken := nodeType("broken-install", "0.01", map[string]string{"image": "stock", "package_delay": "200ms", "package_fault": "curl containerd"})
	broken.JoinTimeout = &metav1.Duration{Duration: 5 * time.Minute}
	startScenario(t, ctx, nodeClass("e2e-broken-install", broken), nodePool("e2e-broken-install", "e2e-broken-install"))
	create(t, ctx, deployment("broken-install", "e2e-broken-install", 1, "500m"))
	var first *v1alpha1.Fulfillment
	eventually(t, ctx, 3*time.Minute, "a claim whose install failed to be destroyed", func(ctx context.Context) (bool, error) {
		for _, f := range tr.byType("broken-install") {
			joined := f.StatusConditions().Get(v1alpha1.ConditionJoined)
			if joined != nil && joined.IsFalse() && joined.Reason != v1alpha1.ReasonInstalling && joined.Reason != v1alpha1.ReasonAwaitingNode &&
				f.StatusConditions().IsTrue(v1alpha1.ConditionDestroyed) {
				first = f
				return true, nil
			}
		}
		return false, nil
	})
	joined := first.StatusConditions().Get(v1alpha1.ConditionJoined)
	if joined.Reason != v1alpha1.ReasonBootstrapFailed || !strings.Contains(joined.Message, "step containerd failed") ||
		!strings.Contains(joined.Message, "The requested URL returned error") {
		t.Errorf("Joined = %s: %q, want %s naming the containerd step and curl's line", joined.Reason, joined.Message, v1alpha1.ReasonBootstrapFailed)
	}
	if waited := joined.LastTransitionTime.Sub(first.Status.Stages.Applied.Time); waited >= broken.JoinTimeout.Duration {
		t.Errorf("the claim failed %s after its apply, not before its join timeout", waited)
	}
	assertMachineAndClaimGone(t, ctx, first.Name)
	cleanup(t, "broken-install", "e2e-broken-install", "e2e-broken-install")
	eventually(t, ctx, time.Minute, "the claims' boot reports to go with them", func(ctx context.Context) (bool, error) {
		var reports v1alpha1.BootReportList
		if err := env.kube.List(ctx, &reports, client.MatchingLabels{keys.LabelNodeClaim: first.Name}); err != nil {
			return false, err
		}
		return len(reports.Items) == 0, nil
	})
	var tokens corev1.SecretList
	if err := env.kube.List(ctx, &tokens, client.InNamespace("kube-system"), client.MatchingLabels{keys.LabelNodeClaim: first.Name}); err != nil {
		t.Fatal(err)
	}
	if len(tokens.Items) != 0 {
		t.Errorf("%d bootstrap tokens of %s left after its destroy", len(tokens.Items), first.Name)
	}
}

// TestControllerRestartMidApply kills the controller while applies are in flight: the runs
// (runner Jobs) go on, the restarted controller adopts them, and no claim gets a second apply
// or is lost.
func TestControllerRestartMidApply(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	startScenario(t, ctx,
		nodeClass("e2e-restart", nodeType("slow", "0.01", map[string]string{"apply_delay": "8"})),
		nodePool("e2e-restart", "e2e-restart"))
	create(t, ctx, deployment("restart", "e2e-restart", 3, "900m"))
	eventually(t, ctx, 2*time.Minute, "applies to be in flight", func(ctx context.Context) (bool, error) {
		n := 0
		for _, f := range fulfillments(t, ctx) {
			if len(f.Status.Runs) > 0 && f.Status.Runs[0].Phase == v1alpha1.RunRunning {
				n++
			}
		}
		return n >= 2, nil
	})
	pid := killController(t)
	eventually(t, ctx, 4*time.Minute, "3 pods to be bound after the restart", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "restart"}, 3)
	})
	eventually(t, ctx, 2*time.Minute, "fulfillments to be Ready", func(ctx context.Context) (bool, error) {
		return devenv.FulfillmentsReady(ctx, env.kube)
	})
	if data, _ := os.ReadFile(devenv.Layout{Dir: env.dir}.ControllerPID()); strings.TrimSpace(string(data)) == strconv.Itoa(pid) {
		t.Fatal("the controller was not restarted")
	}
	ffs := fulfillments(t, ctx)
	claimList := &karpv1.NodeClaimList{}
	if err := env.kube.List(ctx, claimList); err != nil {
		t.Fatal(err)
	}
	if len(claimList.Items) != len(ffs) {
		t.Errorf("%d nodeclaims but %d fulfillments", len(claimList.Items), len(ffs))
	}
	for _, f := range ffs {
		applies := 0
		for _, r := range f.Status.Runs {
			if r.Operation == "apply" {
				applies++
			}
		}
		started := startedRuns(t, ctx, f.Name, "apply")
		if applies != 1 || started != 1 {
			t.Errorf("fulfillment %s: %d apply runs recorded, %d started, want 1 and 1", f.Name, applies, started)
		}
	}
	cleanup(t, "restart", "e2e-restart", "e2e-restart")
}

// TestPreflightBlocksMachines: against a cluster whose bootstrap tokens may not create CSRs,
// the NodeClass says so and no machine is bought; once the RBAC is back, the pod gets a node.
func TestPreflightBlocksMachines(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	crb := &rbacv1.ClusterRoleBinding{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: "kubeadm:kubelet-bootstrap"}, crb); err != nil {
		t.Fatal(err)
	}
	restore := crb.DeepCopy()
	restore.ResourceVersion, restore.UID = "", ""
	if err := env.kube.Delete(ctx, crb); err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			_ = env.kube.Create(context.Background(), restore)
		}
	})
	create(t, ctx, nodeClass("e2e-preflight", nodeType("pre", "0.01", nil)), nodePool("e2e-preflight", "e2e-preflight"))
	var ready *status.Condition
	eventually(t, ctx, time.Minute, "the nodeclass to report the missing RBAC", func(ctx context.Context) (bool, error) {
		nc := &v1alpha1.TofuNodeClass{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: "e2e-preflight"}, nc); err != nil {
			return false, err
		}
		ready = nc.StatusConditions().Get(status.ConditionReady)
		return ready != nil && ready.IsFalse() && ready.Reason == v1alpha1.ReasonBootstrapRBACMissing, nil
	})
	if !strings.Contains(ready.Message, "system:node-bootstrapper") {
		t.Errorf("message %q does not say what to bind", ready.Message)
	}
	create(t, ctx, deployment("preflight", "e2e-preflight", 1, "500m"))
	// Karpenter batches pending pods for up to 10s; give it that and more.
	time.Sleep(15 * time.Second)
	if ffs := fulfillments(t, ctx); len(ffs) != 0 {
		t.Fatalf("%d machines were bought for a nodeclass whose machines could not join", len(ffs))
	}
	if err := env.kube.Create(ctx, restore); err != nil {
		t.Fatal(err)
	}
	restored = true
	eventually(t, ctx, 3*time.Minute, "the pod to be bound once the RBAC is back", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "preflight"}, 1)
	})
	cleanup(t, "preflight", "e2e-preflight", "e2e-preflight")
}

// assertMachineAndClaimGone checks that the destroyed claim's simulated machine left no state
// dir and waits for its NodeClaim to be deleted.
func assertMachineAndClaimGone(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(env.vars["SIM_DIR"], name)); !os.IsNotExist(err) {
		t.Errorf("machine of %s still has its state dir after destroy (err %v)", name, err)
	}
	eventually(t, ctx, time.Minute, "nodeclaim "+name+" to be gone", func(ctx context.Context) (bool, error) {
		err := env.kube.Get(ctx, client.ObjectKey{Name: name}, &karpv1.NodeClaim{})
		return err != nil, client.IgnoreNotFound(err)
	})
}
