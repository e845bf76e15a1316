package claims

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
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/family"
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
			nc := testClass()
			nc.Spec.Module.Source = module
			nc.Spec.Family = tc.family
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "infra"}}
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "infra", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
				Data: map[string][]byte{"INFRA_TOKEN": []byte(statePassphrase)}}
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, secret).WithStatusSubresource(nc).Build()
			clk := clocktesting.NewFakeClock(time.Now())
			c := NewNodeClassController(kube, kube, clk, &recordedEvents{}).WithSecretNamespace("fulfiller").WithFamilies(registry, "prod-eu")
			c.preflight = func(context.Context) (*bootstrap.PreflightFailure, error) { return nil, nil }
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
			if strings.Contains(ready.Message, statePassphrase) {
				t.Error("a credential is in Ready's message")
			}
			if tc.family != "checked" {
				if len(fam.scopes) > 0 {
					t.Errorf("an unknown family's class was checked by another family")
				}
				return
			}
			for _, s := range fam.scopes {
				if s.Cluster != "prod-eu" || s.Env["INFRA_TOKEN"] != statePassphrase || s.Class == nil || s.Class.Name != nc.Name {
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
	if len(r.Rules()) != 0 {
		t.Errorf("rules of families without ErrorRules: %v", r.Rules())
	}
}
