// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/preflight"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

const goodModule = `
variable "node_name" { type = string }
variable "user_data" {
  type      = string
  sensitive = true
}

output "provider_id" { value = "sim://${var.node_name}" }
`

// reconcileClass reconciles the class with source as its module and returns it as written.
func reconcileClass(t *testing.T, c *Controller, kube client.Client, nc *v1alpha1.TofuNodeClass) *v1alpha1.TofuNodeClass {
	t.Helper()
	got := &v1alpha1.TofuNodeClass{}
	if err := kube.Get(context.Background(), client.ObjectKeyFromObject(nc), got); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reconcile(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if err := kube.Get(context.Background(), client.ObjectKeyFromObject(nc), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func moduleController(t *testing.T, source string) (*Controller, client.Client, *v1alpha1.TofuNodeClass, *clocktesting.FakeClock) {
	t.Helper()
	tofu, err := testenv.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	nc := test.TwoTypeClass()
	nc.Spec.Module = v1alpha1.ModuleSource{Source: source} // a version only for a registry source
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc).WithStatusSubresource(nc).Build()
	clk := clocktesting.NewFakeClock(time.Now())
	c := NewController(Options{Kube: kube, APIReader: kube, Clock: clk, Recorder: &recordedEvents{}, SecretNamespace: testNamespace,
		TofuPath: tofu, ModuleDir: t.TempDir(), ModuleRefresh: 10 * time.Minute})
	c.preflight = func(context.Context) (*preflight.Failure, error) { return nil, nil }
	return c, kube, nc, clk
}

// A git source is resolved by tofu into status.modules (its tag's commit, the content's
// digest) and checked; it is resolved again only after the refresh interval.
func TestModuleCheckResolvesGitSources(t *testing.T) {
	repo := testenv.NewGitRepo(t)
	first := repo.Commit(writeModule(t, map[string]string{"main.tf": goodModule}), "node", "v1")
	source := "git::" + repo.Serve() + "//node?ref=v1"
	c, kube, nc, clk := moduleController(t, source)

	got := reconcileClass(t, c, kube, nc)
	if ready := got.StatusConditions().Get(status.ConditionReady); !ready.IsTrue() {
		t.Fatalf("Ready = %+v", ready)
	}
	st, ok := got.ModuleStatusFor(source)
	if !ok || st.Commit != first || !strings.Contains(st.Pinned, "ref="+first) || !strings.HasPrefix(st.Digest, "sha256:") || st.Resolved == nil {
		t.Fatalf("status.modules = %+v, want commit %s pinned", got.Status.Modules, first)
	}

	// The tag moves: within the refresh interval the class keeps its resolution, after it
	// the new commit is what new claims get.
	second := repo.WriteFile("node/extra.tf", "# a change\n", "v1")
	clk.Step(time.Minute)
	if st2, _ := reconcileClass(t, c, kube, nc).ModuleStatusFor(source); st2.Commit != first {
		t.Errorf("the class resolved again within the refresh interval: %+v", st2)
	}
	clk.Step(10 * time.Minute)
	st3, _ := reconcileClass(t, c, kube, nc).ModuleStatusFor(source)
	if st3.Commit != second || st3.Digest == st.Digest {
		t.Errorf("after the refresh interval the class resolved %+v, want commit %s with other content", st3, second)
	}

	// The class moves to another ref: the old source's fetch is removed once no class has
	// asked for it for a while.
	fetches := func() int {
		entries, _ := os.ReadDir(c.modules.dir)
		return len(entries)
	}
	if n := fetches(); n != 1 {
		t.Errorf("%d fetches kept for one source, want 1", n)
	}
	other := repo.WriteFile("node/other.tf", "# v2\n", "v2")
	got = reconcileClass(t, c, kube, nc)
	got.Spec.Module.Source = "git::" + strings.TrimPrefix(strings.TrimSuffix(source, "//node?ref=v1"), "git::") + "//node?ref=v2"
	test.ExpectApplied(t, kube, got)
	clk.Step(31 * time.Minute)
	if st4, _ := reconcileClass(t, c, kube, got).ModuleStatusFor(got.Spec.Module.Source); st4 == nil || st4.Commit != other {
		t.Errorf("the new ref resolved to %+v, want %s", st4, other)
	}
	if n := fetches(); n != 1 {
		t.Errorf("%d fetches kept after the class left its old source, want 1", n)
	}
}

// A source that cannot be fetched, and a fetched module that breaks the contract, fail
// ModuleValid with the reason, and the class is not Ready.
func TestModuleCheckRefusesRemoteSources(t *testing.T) {
	repo := testenv.NewGitRepo(t)
	repo.Commit(writeModule(t, map[string]string{"main.tf": `variable "node_name" { type = string }`}), "no-output", "v1")
	repo.WriteFile("backend/main.tf", "output \"provider_id\" { value = \"x\" }\n\nterraform {\n  backend \"s3\" {}\n}\n", "v2")
	for _, tc := range []struct{ name, source, reason, message string }{
		{"unreachable", "git::file://" + filepath.Join(t.TempDir(), "gone.git") + "?ref=v1", v1alpha1.ReasonModuleNotFound, "gone.git"},
		{"no provider_id", "git::file://" + repo.Bare + "//no-output?ref=v1", v1alpha1.ReasonInvalidModule, "no output provider_id"},
		{"a backend block", "git::file://" + repo.Bare + "//backend?ref=v2", v1alpha1.ReasonInvalidModule, `main.tf:4: the module keeps a backend "s3" block`},
		{"relative path", "./modules/sim", v1alpha1.ReasonModuleNotFound, "absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, kube, nc, _ := moduleController(t, tc.source)
			got := reconcileClass(t, c, kube, nc)
			cond := got.StatusConditions().Get(v1alpha1.ConditionModuleValid)
			if cond == nil || cond.IsTrue() || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.message) {
				t.Errorf("ModuleValid = %+v, want %s saying %q", cond, tc.reason, tc.message)
			}
			if got.StatusConditions().Root().IsTrue() || len(got.Status.Modules) != 0 {
				t.Errorf("a class whose module failed is Ready or lists modules: %+v", got.Status)
			}
		})
	}
}

// A local module's digest is its content's: an edit is seen at the next resolution.
func TestModuleCheckLocalDigest(t *testing.T) {
	dir := writeModule(t, map[string]string{"main.tf": goodModule})
	c, kube, nc, clk := moduleController(t, dir)
	st, _ := reconcileClass(t, c, kube, nc).ModuleStatusFor(dir)
	want, _ := tfrunner.ModuleDigest(dir)
	if st == nil || st.Digest != want || st.Commit != "" || st.Pinned != dir {
		t.Fatalf("status.modules = %+v, want the folder's digest %s", st, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "extra.tf"), []byte("# an edit\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Step(11 * time.Minute)
	edited, _ := reconcileClass(t, c, kube, nc).ModuleStatusFor(dir)
	if edited == nil || edited.Digest == st.Digest {
		t.Errorf("after an edit the digest is %+v, want another than %s", edited, st.Digest)
	}
}

// A node type's own module is resolved and checked beside the class's; a broken one fails
// ModuleValid naming it.
func TestModuleCheckPerTypeModules(t *testing.T) {
	classModule := writeModule(t, map[string]string{"main.tf": goodModule})
	typeModule := writeModule(t, map[string]string{"main.tf": goodModule + "\n# the large type's\n"})
	c, kube, nc, _ := moduleController(t, classModule)
	nc = test.ExpectExists(t, kube, nc)
	nc.Spec.NodeTypes[1].Module = &v1alpha1.ModuleSource{Source: typeModule}
	test.ExpectApplied(t, kube, nc)
	got := reconcileClass(t, c, kube, nc)
	if len(got.Status.Modules) != 2 || got.Status.Modules[0].Source != classModule || got.Status.Modules[1].Source != typeModule ||
		got.Status.Modules[0].Digest == got.Status.Modules[1].Digest {
		t.Fatalf("status.modules = %+v, want the class's and the type's", got.Status.Modules)
	}

	broken := writeModule(t, map[string]string{"main.tf": `variable "node_name" { type = string }`})
	got.Spec.NodeTypes[1].Module = &v1alpha1.ModuleSource{Source: broken}
	test.ExpectApplied(t, kube, got)
	got = reconcileClass(t, c, kube, got)
	cond := got.StatusConditions().Get(v1alpha1.ConditionModuleValid)
	if cond.IsTrue() || cond.Reason != v1alpha1.ReasonInvalidModule || !strings.Contains(cond.Message, "module "+broken+": ") {
		t.Errorf("ModuleValid = %+v, want InvalidModule naming the type's module", cond)
	}
}
