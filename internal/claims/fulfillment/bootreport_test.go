// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// report sets what the claim's machine reported.
func (e *env) report(name string, status v1alpha1.BootReportStatus) {
	e.t.Helper()
	r := &v1alpha1.BootReport{}
	if err := e.kube.Get(e.ctx, client.ObjectKey{Namespace: testNamespace, Name: name}, r); err != nil {
		e.t.Fatal(err)
	}
	r.Status = status
	if err := e.kube.Status().Update(e.ctx, r); err != nil {
		e.t.Fatal(err)
	}
}

// TestBootReport: the bootstrap stage makes the claim's BootReport, owned by its
// Fulfillment, writable by the claim's token only, and renders user data that installs the
// node software of the API server's version and reports there; while the node has not
// registered, Joined says what the machine reported; a failed step replaces the claim with
// BootstrapFailed, the step and the line, before any join timeout.
func TestBootReport(t *testing.T) {
	const name = "sim-b1"
	e := newEnv(t)
	claim := appliedClaim(e, name)
	f := e.fulfillment(name)
	r := &v1alpha1.BootReport{}
	if err := e.kube.Get(e.ctx, client.ObjectKey{Namespace: testNamespace, Name: name}, r); err != nil {
		t.Fatalf("no BootReport: %v", err)
	}
	if r.Spec.TokenID != f.Status.TokenID || len(r.OwnerReferences) != 1 || r.OwnerReferences[0].Name != name || r.OwnerReferences[0].Kind != "Fulfillment" {
		t.Errorf("BootReport %+v does not name the claim's token %s and its Fulfillment", r, f.Status.TokenID)
	}
	token := test.ExpectExists(t, e.kube, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-" + f.Status.TokenID}})
	if groups := string(token.Data["auth-extra-groups"]); groups != bootstrap.DefaultGroup+","+bootstrap.ReportGroup {
		t.Errorf("token groups %q", groups)
	}
	ud := test.ExpectExists(t, e.kube, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: f.Status.UserDataSecret}})
	data := string(ud.Data[classconfig.UserDataKey])
	for _, want := range []string{
		"FULFILLER_INSTALL='packages'", "KUBERNETES_VERSION='v1.36.3'",
		"FULFILLER_REPORT_URL='https://10.0.0.1:6443/apis/fulfiller.sh/v1alpha1/namespaces/" + testNamespace + "/bootreports/" + name + "/status'",
		"path: " + bootstrap.InstallScriptPath,
	} {
		if !strings.Contains(data, want) {
			t.Errorf("user data lacks %s", want)
		}
	}
	jc, err := bootstrap.ParseUserData([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if jc.NodeRegistration.CRISocket != "unix:///run/containerd/containerd.sock" {
		t.Errorf("CRI socket %q, want containerd's, which install.sh sets up", jc.NodeRegistration.CRISocket)
	}

	e.report(name, v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageInstalling, Step: "install"})
	e.reconcile(name)
	e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionUnknown, v1alpha1.ReasonInstalling)
	if got := e.fulfillment(name); got.Status.Phase != v1alpha1.PhaseJoining || got.Status.Reason != v1alpha1.ReasonInstalling {
		t.Errorf("phase %s, reason %s", got.Status.Phase, got.Status.Reason)
	}
	e.report(name, v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageJoining, Step: "join"})
	e.reconcile(name)
	e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionUnknown, v1alpha1.ReasonJoining)
	e.expectEvents()

	e.report(name, v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageFailed, Step: "containerd",
		Message: "fetch exited with status 22 (curl: (22) The requested URL returned error: 404)"})
	e.reconcile(name)
	c := e.expectCondition(name, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonBootstrapFailed)
	if c.Message != "the machine's step containerd failed: fetch exited with status 22 (curl: (22) The requested URL returned error: 404)" {
		t.Errorf("message %q", c.Message)
	}
	e.expectEvents(v1alpha1.ReasonBootstrapFailed)
	e.expectReplaced(claim)
}

// TestBootstrapInstallModes: a class's install mode and Kubernetes version reach the user
// data: none renders no install script, a class's own version wins over the API server's.
func TestBootstrapInstallModes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		install v1alpha1.InstallMode
		version string
		want    []string
		notWant []string
	}{
		{name: "packages of the class's version", install: v1alpha1.InstallPackages, version: "v1.35.2",
			want: []string{"FULFILLER_INSTALL='packages'", "KUBERNETES_VERSION='v1.35.2'"}},
		{name: "none", install: v1alpha1.InstallNone, want: []string{"FULFILLER_INSTALL='none'"},
			notWant: []string{"KUBERNETES_VERSION=", "path: " + bootstrap.InstallScriptPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const name = "sim-m1"
			e := newEnv(t)
			nc := test.ExpectExists(t, e.kube, test.NodeClass("sim"))
			nc.Spec.Bootstrap.Install, nc.Spec.Bootstrap.KubernetesVersion = tc.install, tc.version
			test.ExpectApplied(t, e.kube, nc)
			appliedClaim(e, name)
			f := e.fulfillment(name)
			ud := test.ExpectExists(t, e.kube, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: f.Status.UserDataSecret}})
			data := string(ud.Data[classconfig.UserDataKey])
			for _, w := range tc.want {
				if !strings.Contains(data, w) {
					t.Errorf("user data lacks %s", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(data, w) {
					t.Errorf("user data has %s", w)
				}
			}
		})
	}
}
