// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package reportaccess_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/reportaccess"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

var controlPlane *testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, &controlPlane, testenv.Options{CRDs: testenv.DefaultCRDs()}))
}

const namespace = "fulfiller"

// claimToken mints a claim's token as the controller does (kubeadm's node group and the
// report group) and creates the claim's BootReport naming it.
func claimToken(ctx context.Context, t *testing.T, c client.Client, cs kubernetes.Interface, claim string, groups ...string) (bootstrap.Token, client.Client) {
	t.Helper()
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	secret := bootstrap.TokenSecret(tok, bootstrap.TokenSecretOptions{Expires: time.Now().Add(10 * time.Minute), Description: "test " + claim, Groups: groups})
	if _, err := cs.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	report := &v1alpha1.BootReport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: claim}, Spec: v1alpha1.BootReportSpec{TokenID: tok.ID}}
	if err := c.Create(ctx, report); err != nil {
		t.Fatal(err)
	}
	machine, err := client.New(sim.TokenConfig(controlPlane.Server, controlPlane.CAPEM, tok.String()), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tok, machine
}

// patchStatus is what a machine's boot script sends: a merge patch of a BootReport's status.
func patchStatus(ctx context.Context, c client.Client, claim, stage string) error {
	r := &v1alpha1.BootReport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: claim}}
	return c.Status().Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(`{"status":{"stage":"`+stage+`","step":"install"}}`)))
}

// TestReportOnlyForOwnClaim, against the real API server with real bootstrap-token
// authentication, the real RBAC authorizer and the real admission policy: a claim's token
// reports for its claim; it may not report for another claim, touch a report's spec, create
// or delete reports; a token without the report group may not report at all.
func TestReportOnlyForOwnClaim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := client.New(controlPlane.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(controlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, obj := range reportaccess.Objects(namespace, "fulfiller-boot-report") {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	_, a := claimToken(ctx, t, admin, cs, "claim-a", bootstrap.DefaultGroup, bootstrap.ReportGroup)
	_, b := claimToken(ctx, t, admin, cs, "claim-b", bootstrap.DefaultGroup, bootstrap.ReportGroup)
	_, kubeadmOnly := claimToken(ctx, t, admin, cs, "claim-c", bootstrap.DefaultGroup)

	// A token is accepted a moment after its Secret exists, a policy a moment after it is
	// created: the first report waits for both.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return patchStatus(ctx, a, "claim-a", v1alpha1.BootStageInstalling) == nil && patchStatus(ctx, a, "claim-b", v1alpha1.BootStageFailed) != nil, nil
	})
	if err != nil {
		t.Fatalf("claim-a's token could not report for claim-a, or could for claim-b: %v", err)
	}
	got := &v1alpha1.BootReport{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "claim-a"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Stage != v1alpha1.BootStageInstalling || got.Status.Step != "install" {
		t.Errorf("claim-a's report = %+v", got.Status)
	}

	err = patchStatus(ctx, a, "claim-b", v1alpha1.BootStageFailed)
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), reportaccess.MessageOwnClaim) {
		t.Errorf("claim-a's token reporting for claim-b: %v, want the policy's refusal %q", err, reportaccess.MessageOwnClaim)
	}
	if err := patchStatus(ctx, b, "claim-b", v1alpha1.BootStageJoining); err != nil {
		t.Errorf("claim-b's token reporting for claim-b: %v", err)
	}
	spec := &v1alpha1.BootReport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "claim-b"}}
	if err := a.Patch(ctx, spec, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"tokenID":"aaaaaa"}}`))); !apierrors.IsForbidden(err) {
		t.Errorf("claim-a's token patching claim-b's spec: %v, want forbidden", err)
	}
	if err := a.Create(ctx, &v1alpha1.BootReport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "claim-x"}, Spec: v1alpha1.BootReportSpec{TokenID: "abcdef"}}); !apierrors.IsForbidden(err) {
		t.Errorf("a claim's token creating a report: %v, want forbidden", err)
	}
	if err := a.Delete(ctx, &v1alpha1.BootReport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "claim-a"}}); !apierrors.IsForbidden(err) {
		t.Errorf("a claim's token deleting its report: %v, want forbidden", err)
	}
	if err := patchStatus(ctx, kubeadmOnly, "claim-c", v1alpha1.BootStageJoining); !apierrors.IsForbidden(err) {
		t.Errorf("a token without %s reporting: %v, want forbidden", bootstrap.ReportGroup, err)
	}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "claim-b"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Stage != v1alpha1.BootStageJoining || got.Spec.TokenID == "aaaaaa" {
		t.Errorf("claim-b's report = %+v: another claim's token changed it", got)
	}
}
