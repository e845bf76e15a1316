// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// A registry source's version constraint resolves, with the class's credentials (here the
// registry's CA as SSL_CERT_FILE), into status.modules: the constraint, the exact version and
// the digest; a release published later is taken at the next refresh only. A version on a
// git source fails ModuleValid before anything is fetched.
func TestModuleCheckResolvesRegistrySources(t *testing.T) {
	reg := testenv.NewModuleRegistry(t, "")
	reg.Publish(writeModule(t, map[string]string{"main.tf": goodModule}), "org/node/sim", "1.2.0")
	reg.Publish(writeModule(t, map[string]string{"main.tf": goodModule + "\n# 2.0\n"}), "org/node/sim", "2.0.0")
	source := reg.Source("org/node/sim")
	c, kube, nc, clk := moduleController(t, source)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "registry", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
		Data: map[string][]byte{"SSL_CERT_FILE": []byte(reg.CAFile)}}
	if err := kube.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	nc = test.ExpectExists(t, kube, nc)
	nc.Spec.Module.Version = ">= 1.0, < 2"
	nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "registry"}}
	test.ExpectApplied(t, kube, nc)

	got := reconcileClass(t, c, kube, nc)
	if ready := got.StatusConditions().Get(status.ConditionReady); !ready.IsTrue() {
		t.Fatalf("Ready = %+v", ready)
	}
	st, ok := got.ModuleStatusOf(got.Spec.Module)
	if !ok || st.Version != "1.2.0" || st.Constraint != ">= 1.0, < 2" || st.Pinned != source || !strings.HasPrefix(st.Digest, "sha256:") {
		t.Fatalf("status.modules = %+v, want version 1.2.0 of %s", got.Status.Modules, source)
	}
	if other := (v1alpha1.ModuleSource{Source: source, Version: ">= 2"}); func() bool { _, ok := got.ModuleStatusOf(other); return ok }() {
		t.Error("the status of one constraint is taken for another's")
	}

	reg.Publish(writeModule(t, map[string]string{"main.tf": goodModule + "\n# 1.3\n"}), "org/node/sim", "1.3.0")
	clk.Step(time.Minute)
	if st2, _ := reconcileClass(t, c, kube, got).ModuleStatusOf(got.Spec.Module); st2 == nil || st2.Version != "1.2.0" {
		t.Errorf("the class resolved again within the refresh interval: %+v", st2)
	}
	clk.Step(10 * time.Minute)
	if st3, _ := reconcileClass(t, c, kube, got).ModuleStatusOf(got.Spec.Module); st3 == nil || st3.Version != "1.3.0" || st3.Digest == st.Digest {
		t.Errorf("after the refresh interval the class resolved %+v, want 1.3.0", st3)
	}

	git, kube2, nc2, _ := moduleController(t, "git::https://git.example.com/org/node.git?ref=v1")
	nc2 = test.ExpectExists(t, kube2, nc2)
	nc2.Spec.Module.Version = "1.2.0"
	test.ExpectApplied(t, kube2, nc2)
	cond := reconcileClass(t, git, kube2, nc2).StatusConditions().Get(v1alpha1.ConditionModuleValid)
	if cond == nil || cond.IsTrue() || cond.Reason != v1alpha1.ReasonInvalidModule || !strings.Contains(cond.Message, "only a module registry source") {
		t.Errorf("ModuleValid = %+v, want InvalidModule: a version on a git source", cond)
	}
}
