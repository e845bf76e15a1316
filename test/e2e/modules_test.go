// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// classModule is the class's module status once it has resolved to commit.
func classModule(t *testing.T, ctx context.Context, class, commit string) v1alpha1.ModuleStatus {
	t.Helper()
	var st v1alpha1.ModuleStatus
	eventually(t, ctx, time.Minute, "nodeclass "+class+" to resolve its module to "+commit, func(ctx context.Context) (bool, error) {
		nc := &v1alpha1.TofuNodeClass{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: class}, nc); err != nil {
			return false, err
		}
		got, ok := nc.ModuleStatusFor(nc.Spec.Module.Source)
		if ok {
			st = *got
		}
		return ok && got.Commit == commit, nil
	})
	return st
}

// runOf is the claim's last run of an operation, as the tracker last saw its Fulfillment.
func runOf(t *testing.T, tr *fulfillmentTracker, claim, op string) v1alpha1.Run {
	t.Helper()
	f := tr.byName(claim)
	if f == nil {
		t.Fatalf("fulfillment %s was never seen", claim)
	}
	for i := len(f.Status.Runs) - 1; i >= 0; i-- {
		if string(f.Status.Runs[i].Operation) == op {
			return f.Status.Runs[i]
		}
	}
	t.Fatalf("fulfillment %s has no %s run: %+v", claim, op, f.Status.Runs)
	return v1alpha1.Run{}
}

// TestGitModulePinned: a class whose module is a git repository served over HTTP, pinned to
// a tag, launches a node built from the tag's commit; moving the tag leaves the node alone
// (new claims get the new commit); changing ?ref= drifts it, and its destroy runs the commit
// it was built with although the class points elsewhere.
func TestGitModulePinned(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	tr := trackFulfillments(t)
	repo := testenv.NewGitRepo(t)
	built := repo.Commit(filepath.Join(env.vars["MODULES"], "sim"), "sim", "v1")
	base := "git::" + repo.Serve() + "//sim"
	class := nodeClass("e2e-git", nodeType("git-small", "0.01", nil))
	class.Spec.Module = v1alpha1.ModuleSource{Source: base + "?ref=v1"}
	startScenario(t, ctx, class, nodePool("e2e-git", "e2e-git"))
	defer cleanup(t, "git", "e2e-git", "e2e-git")
	resolved := classModule(t, ctx, class.Name, built)
	if !strings.Contains(resolved.Pinned, "ref="+built) || !strings.HasPrefix(resolved.Digest, "sha256:") || resolved.Resolved == nil {
		t.Errorf("status.modules = %+v, want the tag's commit pinned and a digest", resolved)
	}

	create(t, ctx, deployment("git", "e2e-git", 1, "500m"))
	first := readyFulfillment(t, ctx, "git-small")
	if first.Spec.Module != resolved.Pinned || first.Spec.ModuleDigest != resolved.Digest {
		t.Errorf("the claim recorded module %q digest %q, want %q %q", first.Spec.Module, first.Spec.ModuleDigest, resolved.Pinned, resolved.Digest)
	}
	if log := runLog(t, runOf(t, tr, first.Name, "apply")); !strings.Contains(log, "at commit "+built) {
		t.Errorf("the apply's log does not say it fetched commit %s:\n%s", built, log)
	}

	// The tag moves: the class resolves the new commit, the running node is not drifted.
	moved := repo.WriteFile("sim/moved.tf", "# the tag moved here\n", "v1")
	classModule(t, ctx, class.Name, moved)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		claim := &karpv1.NodeClaim{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: first.Name}, claim); err != nil {
			t.Fatalf("the claim built from %s is gone after its tag moved: %v", built, err)
		}
		if claim.StatusConditions().IsTrue(karpv1.ConditionTypeDrifted) {
			t.Fatalf("the claim drifted when its tag moved: %+v", claim.StatusConditions().Get(karpv1.ConditionTypeDrifted))
		}
	}

	// Another ref drifts the node: a replacement is built from v2, and the first claim's
	// destroy fetches the commit it was built with.
	release := repo.WriteFile("sim/release.tf", "# release 2\n", "v2")
	nc := &v1alpha1.TofuNodeClass{}
	if err := env.kube.Get(ctx, client.ObjectKey{Name: class.Name}, nc); err != nil {
		t.Fatal(err)
	}
	nc.Spec.Module.Source = base + "?ref=v2"
	if err := env.kube.Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	classModule(t, ctx, class.Name, release)
	eventually(t, ctx, 4*time.Minute, "the drifted claim to be replaced and destroyed", func(ctx context.Context) (bool, error) {
		err := env.kube.Get(ctx, client.ObjectKey{Name: first.Name}, &v1alpha1.Fulfillment{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	if log := runLog(t, runOf(t, tr, first.Name, "destroy")); !strings.Contains(log, "at commit "+built) {
		t.Errorf("the destroy's log does not say it fetched commit %s:\n%s", built, log)
	}
	var replacement *v1alpha1.Fulfillment
	eventually(t, ctx, 2*time.Minute, "the replacement to be Ready", func(ctx context.Context) (bool, error) {
		for _, f := range fulfillments(t, ctx) {
			if f.Name != first.Name && f.Spec.NodeClass == class.Name && f.StatusConditions().Root().IsTrue() {
				replacement = &f
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(replacement.Spec.Module, "ref="+release) {
		t.Errorf("the replacement recorded module %q, want commit %s", replacement.Spec.Module, release)
	}
}
