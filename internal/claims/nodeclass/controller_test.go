// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
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
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/preflight"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

const testNamespace = "fulfiller"

type recordedEvents struct{ events []events.Event }

func (r *recordedEvents) Publish(evts ...events.Event) { r.events = append(r.events, evts...) }

func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestNodeClassReadiness: Ready carries the reason and message of the first failed check, so
// one `kubectl get tofunodeclasses` says what is wrong; an event marks each change.
func TestNodeClassReadiness(t *testing.T) {
	good := writeModule(t, map[string]string{"main.tf": `
variable "node_name" { type = string }
variable "user_data" {
  type      = string
  sensitive = true
}

output "provider_id" { value = "sim://${var.node_name}" }
`})
	noOutput := writeModule(t, map[string]string{"main.tf": `variable "node_name" { type = string }`})
	withBackend := writeModule(t, map[string]string{"main.tf": `output "provider_id" { value = "sim://x" }`, "versions.tf": `
terraform {
  backend "kubernetes" {}
}
`})
	requiresImage := writeModule(t, map[string]string{"main.tf": `output "provider_id" { value = "sim://x" }

variable "image" { type = string }
`})
	for _, tc := range []struct {
		name, module, reason string
		message              string // in Ready's message
		mutate               func(*v1alpha1.TofuNodeClass)
		preflight            *preflight.Failure
		ready                bool
		// window: the misfit types the RegistrationWindow condition names; "" when all fit
		window string
	}{
		{name: "valid", module: good, ready: true, reason: "Ready"},
		{name: "module folder missing", module: "/nonexistent/module", reason: v1alpha1.ReasonModuleNotFound},
		{name: "module breaks the contract", module: noOutput, reason: v1alpha1.ReasonInvalidModule, message: "no output provider_id"},
		{name: "module keeps a backend block", module: withBackend, reason: v1alpha1.ReasonInvalidModule, message: `versions.tf:3: the module keeps a backend "kubernetes" block`},
		{name: "module requires a variable not passed", module: requiresImage, reason: v1alpha1.ReasonInvalidModule, message: `main.tf:3: variable "image" is required`},
		{name: "cluster refuses joins", module: good, reason: v1alpha1.ReasonBootstrapRBACMissing,
			preflight: &preflight.Failure{Reason: v1alpha1.ReasonBootstrapRBACMissing, Message: "no CSRs"}},
		{name: "spec invalid", module: good, reason: v1alpha1.ReasonInvalidSpec, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.NodeTypes[0].Offerings[0].Price = "cheap"
		}},
		{name: "encrypted", module: good, ready: true, reason: "Ready", mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend.Encryption = &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "state-key", Key: "passphrase"}}
		}},
		{name: "encryption secret missing", module: good, reason: v1alpha1.ReasonEncryptionKeyMissing, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend.Encryption = &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "no-such-secret", Key: "passphrase"}}
		}},
		{name: "encryption key missing", module: good, reason: v1alpha1.ReasonEncryptionKeyMissing, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend.Encryption = &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "state-key", Key: "other"}}
		}},
		{name: "encryption key too short", module: good, reason: v1alpha1.ReasonInvalidEncryptionKey, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend.Encryption = &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "state-key", Key: "short"}}
		}},
		{name: "pg", module: good, ready: true, reason: "Ready", mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend = v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "pg", Key: "conn"}}}
		}},
		{name: "pg connection secret missing", module: good, reason: v1alpha1.ReasonBackendSecretMissing, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend = v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "pg", Key: "url"}}}
		}},
		// A password with an unencoded '#' cuts the URL short: refused before any run, with what
		// to do and without the value.
		{name: "pg connection string with an unencoded '#'", module: good, reason: v1alpha1.ReasonInvalidBackendSecret, message: "%23", mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend = v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "pg", Key: "hash"}}}
		}},
		{name: "pg connection string with a quote", module: good, reason: v1alpha1.ReasonInvalidBackendSecret, message: "percent-encode", mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend = v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "pg", Key: "quote"}}}
		}},
		{name: "pg without settings", module: good, reason: v1alpha1.ReasonInvalidBackend, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend = v1alpha1.Backend{Type: v1alpha1.BackendPG}
		}},
		// One type too slow for Karpenter's window: a warning, the class still launches the other.
		{name: "one type cannot register in time", module: good, ready: true, reason: "Ready", window: "large (apply 6m + join 10m = 16m)",
			mutate: func(nc *v1alpha1.TofuNodeClass) {
				nc.Spec.NodeTypes[1].Deadlines.Apply = &metav1.Duration{Duration: 6 * time.Minute}
			}},
		{name: "credentials", module: good, ready: true, reason: "Ready", mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "hcloud"}}
		}},
		{name: "credentials secret missing", module: good, reason: v1alpha1.ReasonCredentialsMissing, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "hcloud"}, {SecretName: "no-such-secret"}}
		}},
		{name: "credentials key not an env name", module: good, reason: v1alpha1.ReasonInvalidCredentialsSecret, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "bad-keys"}}
		}},
		// Only Secrets labelled for it may be named: a class cannot make runs carry any Secret of
		// the fulfiller's namespace (the passphrase, a claim's user data) to its module.
		{name: "credentials secret not opted in", module: good, reason: v1alpha1.ReasonCredentialsNotOptedIn,
			message: "secret fulfiller/not-opted-in is not labelled fulfiller.sh/credentials=true", mutate: func(nc *v1alpha1.TofuNodeClass) {
				nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "hcloud"}, {SecretName: "not-opted-in"}}
			}},
		{name: "credentials secret opted out", module: good, reason: v1alpha1.ReasonCredentialsNotOptedIn, mutate: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "opted-out"}}
		}},
		// terraform-exec refuses these in a run's environment: every run would fail.
		{name: "credentials keys tofu's driver refuses", module: good, reason: v1alpha1.ReasonInvalidCredentialsSecret,
			message: "keys TF_CLI_ARGS_apply, TF_LOG, TF_VAR_user_data are set by the fulfiller", mutate: func(nc *v1alpha1.TofuNodeClass) {
				nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "tf-keys"}}
			}},
		{name: "no type can register in time", module: good, reason: v1alpha1.ReasonExceedsRegistrationWindow, window: "small (apply 4m + join 12m = 16m), large",
			mutate: func(nc *v1alpha1.TofuNodeClass) {
				for i := range nc.Spec.NodeTypes {
					nc.Spec.NodeTypes[i].JoinTimeout = &metav1.Duration{Duration: 12 * time.Minute}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := test.TwoTypeClass()
			nc.Spec.Module.Source = tc.module
			if tc.mutate != nil {
				tc.mutate(nc)
			}
			secrets := []client.Object{
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "state-key"},
					Data: map[string][]byte{"passphrase": []byte(test.Passphrase), "short": []byte("0123456789")}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "hcloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
					Data: map[string][]byte{"HCLOUD_TOKEN": []byte(test.Passphrase)}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "bad-keys", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
					Data: map[string][]byte{"hcloud-token": []byte(test.Passphrase)}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "tf-keys", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
					Data: map[string][]byte{"HCLOUD_TOKEN": []byte(test.Passphrase), "TF_LOG": []byte("trace"), "TF_VAR_user_data": []byte("x"), "TF_CLI_ARGS_apply": []byte("-parallelism=1")}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "not-opted-in"},
					Data: map[string][]byte{"HCLOUD_TOKEN": []byte(test.Passphrase)}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "opted-out", Labels: map[string]string{v1alpha1.LabelCredentials: "false"}},
					Data: map[string][]byte{"HCLOUD_TOKEN": []byte(test.Passphrase)}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "pg"},
					Data: map[string][]byte{
						"conn":  []byte("postgres://fulfiller:" + url.PathEscape(test.Passphrase) + "@db/states"),
						"hash":  []byte("postgres://fulfiller:" + test.Passphrase + "#x@db/states"),
						"quote": []byte("postgres://fulfiller:" + test.Passphrase + `"@db/states`),
					}},
			}
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc).WithObjects(secrets...).WithStatusSubresource(nc).Build()
			rec := &recordedEvents{}
			c := NewController(Options{Kube: kube, APIReader: kube, Clock: clocktesting.NewFakeClock(time.Now()), Recorder: rec, SecretNamespace: "fulfiller"})
			c.preflight = func(context.Context) (*preflight.Failure, error) { return tc.preflight, nil }
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
			ready := got.StatusConditions().Get(status.ConditionReady)
			if ready == nil || ready.IsTrue() != tc.ready || ready.Reason != tc.reason {
				t.Fatalf("Ready = %+v, want ready=%v reason %s", ready, tc.ready, tc.reason)
			}
			win := got.StatusConditions().Get(v1alpha1.ConditionRegistrationWindow)
			if fits := tc.window == ""; win == nil || win.IsTrue() != fits || (!fits && (win.Reason != v1alpha1.ReasonExceedsRegistrationWindow || !strings.Contains(win.Message, tc.window))) {
				t.Errorf("RegistrationWindow = %+v, want fits=%v naming %q", win, fits, tc.window)
			}
			launchable := got.StatusConditions().Get(v1alpha1.ConditionNodeTypesLaunchable)
			if wantNone := tc.reason == v1alpha1.ReasonExceedsRegistrationWindow; launchable == nil || launchable.IsTrue() == wantNone {
				t.Errorf("NodeTypesLaunchable = %+v", launchable)
			}
			if !tc.ready && ready.Message == "" {
				t.Error("Ready=False without a message")
			}
			if !strings.Contains(ready.Message, tc.message) {
				t.Errorf("Ready's message %q does not say %q", ready.Message, tc.message)
			}
			if strings.Contains(ready.Message, test.Passphrase) || strings.Contains(fmt.Sprint(rec.events), test.Passphrase) {
				t.Error("a secret value is in the condition or an event")
			}
			if len(rec.events) != 1 || rec.events[0].Reason != tc.reason {
				t.Errorf("events = %+v, want one %s", rec.events, tc.reason)
			}
			// A second reconcile with nothing changed writes and publishes nothing.
			if _, err := c.Reconcile(context.Background(), got); err != nil {
				t.Fatal(err)
			}
			if len(rec.events) != 1 {
				t.Errorf("%d events after a reconcile that changed nothing", len(rec.events))
			}
		})
	}
}

// The controller's checks are the API's: Ready is composed of exactly the conditions
// TofuNodeClass.StatusConditions names, in the same order (a class with a catalogue adds
// CatalogReady, which counts only while it has no list to use).
func TestClassChecksAreTheAPIs(t *testing.T) {
	c := NewController(Options{Clock: clocktesting.NewFakeClock(time.Now())})
	var got []string
	for _, chk := range c.checks(&v1alpha1.TofuNodeClass{}) {
		got = append(got, chk.condition)
	}
	if want := v1alpha1.ClassChecks(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("checks %v, the API's %v", got, want)
	}
}
