// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/preflight"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// checkedFamily is a family with a class check and a credentials check, both scripted, that
// records the scopes it was called with.
type checkedFamily struct {
	name           string
	checkErr       error
	credentialsErr error
	credentialsAsk int
	scopes         []family.Scope
}

func (f *checkedFamily) Name() string { return f.name }

func (f *checkedFamily) ClassChecks() []family.Check {
	return []family.Check{{Condition: "InfraReady", Run: func(_ context.Context, s family.Scope) error {
		f.scopes = append(f.scopes, s)
		return f.checkErr
	}}}
}

func (f *checkedFamily) CheckCredentials(_ context.Context, s family.Scope) error {
	f.credentialsAsk++
	f.scopes = append(f.scopes, s)
	return f.credentialsErr
}

// TestNodeClassFamilyChecks: a class's family adds its checks after the generic ones, with the
// class's credentials and the cluster's name in their scope; Ready takes the first failing
// check's reason; the family's verdict on the credentials joins CredentialsReady and its API
// is asked again only after a while; a family the binary does not know is an invalid spec.
func TestNodeClassFamilyChecks(t *testing.T) {
	module := writeModule(t, map[string]string{"main.tf": `
variable "node_name" { type = string }
output "provider_id" { value = "sim://${var.node_name}" }
`})
	for _, tc := range []struct {
		name, family    string
		checkErr, cred  error
		ready           bool
		reason, message string
		// condition whose status and reason are checked (besides Ready)
		condition, conditionReason string
		conditionStatus            metav1.ConditionStatus
	}{
		{name: "all pass", family: "checked", ready: true, reason: "Ready",
			condition: "InfraReady", conditionStatus: metav1.ConditionTrue},
		{name: "family check fails", family: "checked", checkErr: family.Errorf("NamespaceForbidden", "cannot create VMs in tenant-nodes"),
			reason: "NamespaceForbidden", message: "tenant-nodes",
			condition: "InfraReady", conditionStatus: metav1.ConditionFalse, conditionReason: "NamespaceForbidden"},
		{name: "credentials refused", family: "checked", cred: family.Errorf(v1alpha1.ReasonInvalidCredentials, "token cannot read servers"),
			reason: v1alpha1.ReasonInvalidCredentials, message: "cannot read servers",
			condition: v1alpha1.ConditionCredentialsReady, conditionStatus: metav1.ConditionFalse, conditionReason: v1alpha1.ReasonInvalidCredentials},
		{name: "credentials not checkable", family: "checked", cred: errors.New("dial tcp: connection refused"),
			reason: v1alpha1.ReasonCredentialsUnchecked, message: "connection refused",
			condition: v1alpha1.ConditionCredentialsReady, conditionStatus: metav1.ConditionUnknown, conditionReason: v1alpha1.ReasonCredentialsUnchecked},
		{name: "unknown family", family: "robot", reason: v1alpha1.ReasonInvalidSpec, message: "family robot is not built into this controller",
			condition: v1alpha1.ConditionSpecValid, conditionStatus: metav1.ConditionFalse, conditionReason: v1alpha1.ReasonInvalidSpec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fam := &checkedFamily{name: "checked", checkErr: tc.checkErr, credentialsErr: tc.cred}
			registry, err := family.NewRegistry(fam)
			if err != nil {
				t.Fatal(err)
			}
			nc := test.TwoTypeClass()
			nc.Spec.Module.Source = module
			nc.Spec.Family = tc.family
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "infra"}}
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "infra", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
				Data: map[string][]byte{"INFRA_TOKEN": []byte(test.Passphrase)}}
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, secret).WithStatusSubresource(nc).Build()
			clk := clocktesting.NewFakeClock(time.Now())
			c := NewController(Options{Kube: kube, APIReader: kube, Clock: clk, Recorder: &recordedEvents{}, SecretNamespace: "fulfiller", Families: registry, Cluster: "prod-eu"})
			c.preflight = func(context.Context) (*preflight.Failure, error) { return nil, nil }
			reconcileClass := func() *v1alpha1.TofuNodeClass {
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
			got := reconcileClass()
			ready := got.StatusConditions().Get(status.ConditionReady)
			if ready.IsTrue() != tc.ready || ready.Reason != tc.reason || !strings.Contains(ready.Message, tc.message) {
				t.Errorf("Ready = %s %s %q, want ready=%v %s with %q", ready.Status, ready.Reason, ready.Message, tc.ready, tc.reason, tc.message)
			}
			cond := got.StatusConditions().Get(tc.condition)
			if cond == nil || cond.Status != tc.conditionStatus || (tc.conditionReason != "" && cond.Reason != tc.conditionReason) {
				t.Errorf("%s = %+v, want %s %s", tc.condition, cond, tc.conditionStatus, tc.conditionReason)
			}
			if strings.Contains(ready.Message, test.Passphrase) {
				t.Error("a credential is in Ready's message")
			}
			if tc.family != "checked" {
				if len(fam.scopes) > 0 {
					t.Errorf("an unknown family's class was checked by another family")
				}
				return
			}
			for _, s := range fam.scopes {
				if s.Cluster != "prod-eu" || s.Env["INFRA_TOKEN"] != test.Passphrase || s.Class == nil || s.Class.Name != nc.Name {
					t.Errorf("scope = cluster %q, class %v, env keys %d", s.Cluster, s.Class != nil, len(s.Env))
				}
			}
			// The credentials are not asked about again within the recheck interval...
			asked := fam.credentialsAsk
			reconcileClass()
			if fam.credentialsAsk != asked {
				t.Errorf("credentials checked %d times in two reconciles", fam.credentialsAsk)
			}
			// ...but after it.
			clk.Step(credentialsRecheck + time.Second)
			reconcileClass()
			if fam.credentialsAsk != asked+1 {
				t.Errorf("credentials checked %d times after the recheck interval, want %d", fam.credentialsAsk, asked+1)
			}
		})
	}
}

// The families' registry refuses two families of one name, and knows the generic one.
func TestRegistry(t *testing.T) {
	if _, err := family.NewRegistry(&checkedFamily{name: "a"}, &checkedFamily{name: "a"}); err == nil {
		t.Error("two families named a registered")
	}
	r, err := family.NewRegistry(&checkedFamily{name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Knows("") || !r.Knows("a") || r.Knows("b") {
		t.Errorf("Knows: generic %v, a %v, b %v", r.Knows(""), r.Knows("a"), r.Knows("b"))
	}
	if _, ok := r.Get(""); ok {
		t.Error("the generic family is a registered one")
	}
}

// TestNodeClassHcloudCredentials: a class of the Hetzner Cloud family is not Ready, with
// InvalidCredentials and a message that says why and holds no token, when its token is
// revoked or missing; the family read the API at most once and bought nothing. A good token
// makes it Ready.
func TestNodeClassHcloudCredentials(t *testing.T) {
	module := writeModule(t, map[string]string{"main.tf": `
variable "node_name" { type = string }
output "provider_id" { value = "hcloud://1" }
`})
	for _, tc := range []struct {
		name    string
		revoke  bool
		noToken bool
		ready   bool
		message string
		reads   int
	}{
		{name: "good token", ready: true, reads: 1},
		{name: "revoked token", revoke: true, message: "the Hetzner Cloud API refused the class's HCLOUD_TOKEN: unable to authenticate (unauthorized, HTTP 401)", reads: 1},
		{name: "no token", noToken: true, message: "no HCLOUD_TOKEN (the Hetzner Cloud API token) in the class's credentials (secret hcloud)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := standin.StartT(t, standin.Options{})
			if tc.revoke {
				api.RevokeToken()
			}
			registry, err := family.NewRegistry(hcloud.NewFamily())
			if err != nil {
				t.Fatal(err)
			}
			nc := test.TwoTypeClass()
			nc.Spec.Module.Source = module
			nc.Spec.Family = v1alpha1.FamilyHcloud
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "hcloud"}}
			data := map[string][]byte{hcloud.EnvEndpoint: []byte(api.Endpoint())}
			if !tc.noToken {
				data[hcloud.EnvToken] = []byte(api.Token())
			}
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "hcloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}}, Data: data}
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, secret).WithStatusSubresource(nc).Build()
			c := NewController(Options{Kube: kube, APIReader: kube, Clock: clocktesting.NewFakeClock(time.Now()), Recorder: &recordedEvents{},
				SecretNamespace: "fulfiller", Families: registry, Cluster: "prod-eu"})
			c.preflight = func(context.Context) (*preflight.Failure, error) { return nil, nil }
			got := &v1alpha1.TofuNodeClass{}
			for range 2 { // the second reconcile uses the cached verdict
				if err := kube.Get(context.Background(), client.ObjectKeyFromObject(nc), got); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Reconcile(context.Background(), got); err != nil {
					t.Fatal(err)
				}
			}
			if err := kube.Get(context.Background(), client.ObjectKeyFromObject(nc), got); err != nil {
				t.Fatal(err)
			}
			ready := got.StatusConditions().Get(status.ConditionReady)
			cred := got.StatusConditions().Get(v1alpha1.ConditionCredentialsReady)
			if tc.ready {
				if !ready.IsTrue() || !cred.IsTrue() {
					t.Errorf("Ready = %s %s %q, CredentialsReady = %s, want both true", ready.Status, ready.Reason, ready.Message, cred.Status)
				}
			} else {
				for _, cond := range []*status.Condition{ready, cred} {
					if cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonInvalidCredentials || cond.Message != tc.message {
						t.Errorf("%s = %s %s %q, want False %s %q", cond.Type, cond.Status, cond.Reason, cond.Message, v1alpha1.ReasonInvalidCredentials, tc.message)
					}
				}
			}
			if strings.Contains(ready.Message+cred.Message, api.Token()) {
				t.Error("the token is in a condition")
			}
			requests := api.Requests()
			if len(requests) != tc.reads {
				t.Errorf("API requests = %v, want %d read", requests, tc.reads)
			}
			for _, r := range requests {
				if r.Method != "GET" {
					t.Errorf("the credentials check made %s", r)
				}
			}
		})
	}
}
