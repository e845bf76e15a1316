// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// recordedClass is a Ready class whose runs need Secrets: an encryption key, credentials, and
// states in a namespace of its own.
func recordedClass(name string) *v1alpha1.TofuNodeClass {
	nc := test.NodeClass(name, func(nc *v1alpha1.TofuNodeClass) {
		nc.Spec.Backend = v1alpha1.Backend{Namespace: "states-a",
			Encryption: &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "key-1", Key: "passphrase"}}}
		nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "creds-1"}}
		nc.Spec.Variables = map[string]string{"image": "ubuntu-24.04", "cluster": "prod"}
		nc.Spec.NodeTypes[0].Variables = map[string]string{"image": "ubuntu-26.04"}
	})
	test.Ready(nc)
	return nc
}

func credentialsSecret(name, token string) *corev1.Secret {
	s := test.Secret(testNamespace, name, map[string]string{"HCLOUD_TOKEN": token})
	s.Labels = map[string]string{v1alpha1.LabelCredentials: "true"}
	return s
}

// TestRunsUseRecordedSettings: every run of a claim, its destroy included, uses what its
// class said when Create decided: a class edited or deleted since cannot send the destroy to
// another backend, key, account or module input (the machine and its state would leak, or
// the destroy wedge).
func TestRunsUseRecordedSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change does to the class what a user did after the apply
		change func(t *testing.T, e *env, nc *v1alpha1.TofuNodeClass)
	}{
		{"the class edited", func(t *testing.T, e *env, nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend.Encryption.KeySecretRef.Name = "key-2"
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "creds-2"}}
			nc.Spec.Variables = map[string]string{"image": "debian-13"}
			nc.Spec.NodeTypes[0].Variables = nil
			nc.Spec.NodeTypes[0].Architecture = "arm64"
			test.ExpectApplied(t, e.kube, nc)
		}},
		{"the class deleted", func(t *testing.T, e *env, nc *v1alpha1.TofuNodeClass) {
			nc.Finalizers = nil
			test.ExpectApplied(t, e.kube, nc)
			if err := e.kube.Delete(e.ctx, nc); err != nil {
				t.Fatal(err)
			}
			test.ExpectNotFound(t, e.kube, nc)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := recordedClass("sim")
			e := newEnv(t, nc,
				test.Secret(testNamespace, "key-1", map[string]string{"passphrase": "the first passphrase, long enough"}),
				test.Secret(testNamespace, "key-2", map[string]string{"passphrase": "the second passphrase, long enough"}),
				credentialsSecret("creds-1", "token-1"), credentialsSecret("creds-2", "token-2"))
			claim := test.NodeClaim("sim-rec01", "sim", e.clock.Now())
			e.create(claim)
			e.reconcile(claim.Name)
			apply, ok := e.exec.Request("sim-rec01-apply-1")
			if !ok {
				t.Fatal("no apply started")
			}
			e.reconcile(claim.Name)
			e.expectCondition(claim.Name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
			// The apply's state, where the class said.
			test.ExpectApplied(t, e.kube, test.Secret("states-a", "tfstate-default-sim-rec01", nil))

			tc.change(t, e, test.ExpectExists(t, e.kube, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"}}))

			if err := e.provider.Delete(e.ctx, claim); err != nil {
				t.Fatal(err)
			}
			e.reconcile(claim.Name)
			destroy, ok := e.exec.Request("sim-rec01-destroy-1")
			if !ok {
				t.Fatalf("no destroy started; runs %v, Destroyed %+v", e.exec.Created(), e.fulfillment(claim.Name).StatusConditions().Get(v1alpha1.ConditionDestroyed))
			}
			if !maps.Equal(destroy.Backend.Config, apply.Backend.Config) || destroy.Backend.Type != apply.Backend.Type || destroy.Backend.Config["namespace"] != "states-a" {
				t.Errorf("destroy backend %+v, the apply's %+v", destroy.Backend, apply.Backend)
			}
			for _, k := range []string{"TF_ENCRYPTION", "HCLOUD_TOKEN"} {
				if destroy.Env[k] == "" || destroy.Env[k] != apply.Env[k] {
					t.Errorf("destroy's %s differs from the apply's", k)
				}
			}
			for _, v := range []string{tfrunner.VarParameters, tfrunner.VarLabels} {
				if !maps.Equal(destroy.Variables[v].(map[string]string), apply.Variables[v].(map[string]string)) {
					t.Errorf("destroy's %s %v, the apply's %v", v, destroy.Variables[v], apply.Variables[v])
				}
			}
			if want := map[string]string{"image": "ubuntu-26.04", "cluster": "prod"}; !maps.Equal(apply.Variables[tfrunner.VarParameters].(map[string]string), want) {
				t.Errorf("parameters %v, want %v", apply.Variables[tfrunner.VarParameters], want)
			}
			if l := apply.Variables[tfrunner.VarLabels].(map[string]string); l[corev1.LabelArchStable] != "amd64" || l[karpv1.NodePoolLabelKey] != "default" {
				t.Errorf("labels %v", l)
			}
			e.reconcile(claim.Name)
			test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim.Name}},
				test.Secret("states-a", "tfstate-default-sim-rec01", nil))
		})
	}
}
