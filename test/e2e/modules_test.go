// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// typedDeployment is a workload for pool whose pods only a node of nodeType takes.
func typedDeployment(name, pool, nodeType string) *appsv1.Deployment {
	d := deployment(name, pool, 1, "500m")
	d.Spec.Template.Spec.NodeSelector[corev1.LabelInstanceTypeStable] = nodeType
	return d
}

// TestModuleSourcesAndChecks: sources that cannot be fetched or break the contract are class
// conditions, and their classes buy nothing; a class's module from an HTTP archive and a node
// type's own local module each build their type's nodes only; editing the local module
// drifts its nodes and leaves the others.
func TestModuleSourcesAndChecks(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	tr := trackFulfillments(t)

	noOutput, withBackend, requiresVar := t.TempDir(), t.TempDir(), t.TempDir()
	for dir, main := range map[string]string{
		noOutput:    "variable \"node_name\" {\n  type = string\n}\n",
		withBackend: "output \"provider_id\" {\n  value = \"sim://x\"\n}\n\nterraform {\n  backend \"s3\" {}\n}\n",
		requiresVar: "output \"provider_id\" {\n  value = \"sim://x\"\n}\n\nvariable \"image\" {\n  type = string\n}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, source, reason, message string }{
		{"e2e-unreachable", "git::file://" + filepath.Join(t.TempDir(), "gone.git") + "?ref=v1", v1alpha1.ReasonModuleNotFound, "gone.git"},
		{"e2e-no-output", noOutput, v1alpha1.ReasonInvalidModule, "no output provider_id"},
		{"e2e-backend", withBackend, v1alpha1.ReasonInvalidModule, `main.tf:6: the module keeps a backend "s3" block`},
		{"e2e-required-var", requiresVar, v1alpha1.ReasonInvalidModule, `main.tf:5: variable "image" is required`},
	} {
		broken := nodeClass(tc.name, nodeType(tc.name+"-small", "0.01", nil))
		broken.Spec.Module = v1alpha1.ModuleSource{Source: tc.source}
		create(t, ctx, broken, nodePool(tc.name, tc.name), deployment(tc.name, tc.name, 1, "500m"))
		defer cleanup(t, tc.name, tc.name, tc.name) // after the good class's: nothing to drain
		cond := classCondition(t, ctx, tc.name, v1alpha1.ConditionModuleValid, metav1.ConditionFalse, tc.reason)
		if !strings.Contains(cond.Message, tc.message) {
			t.Errorf("%s: ModuleValid says %q, want %q", tc.name, cond.Message, tc.message)
		}
	}
	// Their pods stay pending while the good class below launches nodes; at the end no
	// Fulfillment of theirs was ever seen.
	defer func() {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, f := range tr.seen {
			if f.Spec.NodeClass != "e2e-modsrc" {
				t.Errorf("class %s bought %s", f.Spec.NodeClass, f.Name)
			}
		}
	}()

	sim := filepath.Join(env.vars["MODULES"], "sim")
	archive := filepath.Join(t.TempDir(), "sim.tar.gz")
	if out, err := exec.Command("tar", "-czf", archive, "-C", sim, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(archive))))
	defer srv.Close()
	local := t.TempDir()
	if out, err := exec.Command("cp", "-r", sim+"/.", local).CombinedOutput(); err != nil {
		t.Fatalf("copying modules/sim: %v\n%s", err, out)
	}

	class := nodeClass("e2e-modsrc", nodeType("archive-small", "0.01", nil), nodeType("local-large", "0.03", map[string]string{"cpu": "4"}))
	class.Spec.Module = v1alpha1.ModuleSource{Source: srv.URL + "/sim.tar.gz"}
	class.Spec.NodeTypes[1].Module = &v1alpha1.ModuleSource{Source: local}
	startScenario(t, ctx, class, nodePool("e2e-modsrc", "e2e-modsrc"))
	defer cleanup(t, "modsrc-archive", "e2e-modsrc", "e2e-modsrc")
	create(t, ctx, typedDeployment("modsrc-archive", "e2e-modsrc", "archive-small"), typedDeployment("modsrc-local", "e2e-modsrc", "local-large"))
	defer func() {
		_ = env.kube.Delete(context.Background(), typedDeployment("modsrc-local", "e2e-modsrc", "local-large"))
	}()
	fromArchive, fromLocal := readyFulfillment(t, ctx, "archive-small"), readyFulfillment(t, ctx, "local-large")
	if fromArchive.Spec.Module != class.Spec.Module.Source || fromLocal.Spec.Module != local {
		t.Errorf("modules recorded: %q for archive-small, %q for local-large; want the class's and the type's own", fromArchive.Spec.Module, fromLocal.Spec.Module)
	}
	if fromArchive.Spec.ModuleDigest == "" || fromArchive.Spec.ModuleDigest != fromLocal.Spec.ModuleDigest {
		t.Errorf("the same files gave digests %q and %q", fromArchive.Spec.ModuleDigest, fromLocal.Spec.ModuleDigest)
	}

	// An edit of the local module drifts the local-large node only: it is replaced.
	if err := os.WriteFile(filepath.Join(local, "edited.tf"), []byte("# an edit of the module\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, 4*time.Minute, "the local-large node built before the edit to be replaced", func(ctx context.Context) (bool, error) {
		if err := env.kube.Get(ctx, client.ObjectKey{Name: fromLocal.Name}, &v1alpha1.Fulfillment{}); client.IgnoreNotFound(err) != nil || err == nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, f := range fulfillments(t, ctx) {
			if f.Spec.NodeType == "local-large" && f.StatusConditions().Root().IsTrue() {
				return f.Spec.ModuleDigest != fromLocal.Spec.ModuleDigest, nil
			}
		}
		return false, nil
	})
	if err := env.kube.Get(ctx, client.ObjectKey{Name: fromArchive.Name}, &v1alpha1.Fulfillment{}); err != nil {
		t.Errorf("the archive-small node went with the edit of another type's module: %v", err)
	}
}
