// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// TestEncryptionChanges: each claim's state stays encrypted (or not) as it was written. A
// class's encryption turned on, or its key Secret renamed, applies to new claims only, and
// drifts nothing; a passphrase whose value changed in its Secret is reported on the claims
// whose states it cannot read, and their runs wait for it instead of failing to decrypt.
func TestEncryptionChanges(t *testing.T) {
	const first, second = "the first passphrase, 16+", "the second passphrase, 16+"
	keyRef := func(name string) *v1alpha1.BackendEncryption {
		return &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: name, Key: "passphrase"}}
	}
	encEnv := func(t *testing.T, passphrase string) string {
		env, err := statelock.EncryptionEnv(passphrase, "aes_gcm")
		if err != nil {
			t.Fatal(err)
		}
		return env[statelock.EncryptionEnvVar]
	}
	// applied brings a claim of the class "sim" to an applied machine with its state.
	applied := func(e *env, name string) {
		t.Helper()
		e.create(test.NodeClaim(name, "sim", e.clock.Now()))
		e.reconcile(name)
		e.reconcile(name)
		e.expectCondition(name, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
		e.writeState(name)
	}
	setEncryption := func(e *env, enc *v1alpha1.BackendEncryption) {
		t.Helper()
		nc := test.ExpectExists(t, e.kube, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"}})
		nc.Spec.Backend.Encryption = enc
		test.ExpectApplied(t, e.kube, nc)
	}
	deleted := func(e *env, name string) {
		t.Helper()
		if err := e.provider.Delete(e.ctx, test.NodeClaim(name, "sim", e.clock.Now())); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a passphrase changed in its Secret is reported, and the destroy waits for it", func(t *testing.T) {
		e := newEnv(t, test.Secret(testNamespace, "state-key", map[string]string{"passphrase": first}))
		setEncryption(e, keyRef("state-key"))
		applied(e, "sim-key1")
		fp := e.fulfillment("sim-key1").Status.EncryptionKeyFingerprint
		if want, _ := statelock.KeyFingerprint(first); fp != want {
			t.Fatalf("recorded key fingerprint %q, want %q", fp, want)
		}
		test.ExpectApplied(t, e.kube, test.Secret(testNamespace, "state-key", map[string]string{"passphrase": second}))
		deleted(e, "sim-key1")
		for range 2 {
			e.reconcile("sim-key1")
			cond := e.expectCondition("sim-key1", v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonEncryptionKeyChanged)
			if !strings.Contains(cond.Message, "secret fulfiller/state-key key passphrase") || !strings.Contains(cond.Message, fp) {
				t.Errorf("message %q does not say which Secret and which key the state needs", cond.Message)
			}
			if strings.Contains(cond.Message, first) || strings.Contains(cond.Message, second) {
				t.Errorf("message %q holds a passphrase", cond.Message)
			}
			e.expectCreated("sim-key1-apply-1")
		}
		// The passphrase is back: the destroy runs with it.
		test.ExpectApplied(t, e.kube, test.Secret(testNamespace, "state-key", map[string]string{"passphrase": first}))
		e.reconcile("sim-key1")
		e.expectCondition("sim-key1", v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonDestroying)
		if req, _ := e.exec.Request("sim-key1-destroy-1"); req.Env[statelock.EncryptionEnvVar] != encEnv(t, first) {
			t.Error("the destroy does not use the passphrase the state was written with")
		}
		e.reconcile("sim-key1")
		test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "sim-key1"}})
	})

	t.Run("a key Secret renamed and the old one deleted: the class's is used if it holds the same passphrase", func(t *testing.T) {
		e := newEnv(t, test.Secret(testNamespace, "state-key", map[string]string{"passphrase": first}),
			test.Secret(testNamespace, "renamed-key", map[string]string{"passphrase": second}))
		setEncryption(e, keyRef("state-key"))
		applied(e, "sim-ren1")
		setEncryption(e, keyRef("renamed-key"))
		if err := e.kube.Delete(e.ctx, test.Secret(testNamespace, "state-key", nil)); err != nil {
			t.Fatal(err)
		}
		deleted(e, "sim-ren1")
		// The renamed Secret holds another passphrase: said precisely, nothing runs.
		e.reconcile("sim-ren1")
		cond := e.expectCondition("sim-ren1", v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonEncryptionKeyChanged)
		if !strings.Contains(cond.Message, "secret fulfiller/renamed-key") {
			t.Errorf("message %q does not name the class's Secret", cond.Message)
		}
		e.expectCreated("sim-ren1-apply-1")
		// It holds the same passphrase: the destroy runs with it.
		test.ExpectApplied(t, e.kube, test.Secret(testNamespace, "renamed-key", map[string]string{"passphrase": first}))
		e.reconcile("sim-ren1")
		e.expectCondition("sim-ren1", v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonDestroying)
		if req, _ := e.exec.Request("sim-ren1-destroy-1"); req.Env[statelock.EncryptionEnvVar] != encEnv(t, first) {
			t.Error("the destroy does not use the passphrase the state was written with")
		}
		e.reconcile("sim-ren1")
		test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "sim-ren1"}})
	})

	t.Run("encryption turned on, or its Secret renamed, is for new claims; each claim keeps its own", func(t *testing.T) {
		e := newEnv(t, test.Secret(testNamespace, "state-key", map[string]string{"passphrase": first}),
			test.Secret(testNamespace, "state-key-2", map[string]string{"passphrase": second}))
		applied(e, "sim-plain")
		setEncryption(e, keyRef("state-key"))
		applied(e, "sim-enc1")
		setEncryption(e, keyRef("state-key-2"))
		applied(e, "sim-enc2")
		for name, want := range map[string]string{"sim-plain": "", "sim-enc1": encEnv(t, first), "sim-enc2": encEnv(t, second)} {
			if req, _ := e.exec.Request(name + "-apply-1"); req.Env[statelock.EncryptionEnvVar] != want {
				t.Errorf("%s applied with encryption %q, want %q", name, req.Env[statelock.EncryptionEnvVar], want)
			}
			deleted(e, name)
			e.reconcile(name)
			e.expectCondition(name, v1alpha1.ConditionDestroyed, metav1.ConditionUnknown, v1alpha1.ReasonDestroying)
			if req, _ := e.exec.Request(name + "-destroy-1"); req.Env[statelock.EncryptionEnvVar] != want {
				t.Errorf("%s destroyed with encryption %q, want %q (as it was applied)", name, req.Env[statelock.EncryptionEnvVar], want)
			}
			e.reconcile(name)
			test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
}
