// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestEncryptedStateOnKubernetesBackend runs modules/sim with the kubernetes backend against a
// real API server, with and without state encryption: the encrypted state Secret holds
// nothing of the claim in plain text (an unencrypted one does), destroy works with the same
// key, a wrong key and a plaintext state are refused with class InvalidCredentials. The
// state Secret and the lock Lease carry the labels of the backend configuration.
func TestEncryptedStateOnKubernetesBackend(t *testing.T) {
	ctx := context.Background()
	cp := testenv.StartT(t, testenv.Options{})
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubeEnv := map[string]string{"KUBE_CONFIG_PATH": cp.Kubeconfig}
	// The state objects carry their claim's UID, as the controller labels them.
	labels := map[string]string{keys.LabelNodeClaimUID: "0b1e5a6c-1111-2222-3333-444455556666"}
	backend := func(key statelock.Key) tfrunner.Backend {
		return tfrunner.Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(key, "default"), Maps: map[string]map[string]string{"labels": labels}}
	}
	// A passphrase with template sequences and quotes: they must reach pbkdf2 unchanged.
	passphrase := testPassphrase
	encEnv, err := statelock.EncryptionEnv(passphrase, "aes_gcm")
	if err != nil {
		t.Fatal(err)
	}
	withEnc := func(enc map[string]string) map[string]string {
		env := maps.Clone(kubeEnv)
		maps.Copy(env, enc)
		return env
	}
	stateOf := func(key statelock.Key) string {
		t.Helper()
		secret, err := cs.CoreV1().Secrets("default").Get(ctx, key.SecretName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if secret.Annotations["encoding"] != "gzip" {
			t.Errorf("state secret annotations %v, want encoding gzip", secret.Annotations)
		}
		lease, err := cs.CoordinationV1().Leases("default").Get(ctx, key.LeaseName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range labels {
			if secret.Labels[k] != v || lease.Labels[k] != v {
				t.Errorf("state secret labels %v, lease labels %v: want %s=%s on both", secret.Labels, lease.Labels, k, v)
			}
		}
		return gunzip(t, secret.Data["tfstate"])
	}

	// Unencrypted, for comparison: the state names the machine and keeps the user data's hash.
	plainKey := statelock.Key("enc-plain")
	res, log := run(t, ctx, simRun(t, string(plainKey), tfrunner.Apply, backend(plainKey), "", kubeEnv, nil))
	if !res.Succeeded {
		t.Fatalf("unencrypted apply: %+v\n%s", res.Error, log)
	}
	plain := stateOf(plainKey)
	if !strings.Contains(plain, "terraform_data") || !strings.Contains(plain, userDataHash()) {
		t.Fatalf("the unencrypted state does not show what the encrypted one must hide:\n%s", plain)
	}

	key := statelock.Key("enc-claim")
	res, log = run(t, ctx, simRun(t, string(key), tfrunner.Apply, backend(key), "", withEnc(encEnv), nil))
	if !res.Succeeded || !strings.HasPrefix(res.ProviderID, "sim://") {
		t.Fatalf("encrypted apply: %+v\n%s", res.Error, log)
	}
	state := stateOf(key)
	for _, s := range []string{fakeToken, "#cloud-config", userDataHash(), "terraform_data", string(key), "sim://", passphrase} {
		if strings.Contains(state, s) {
			t.Errorf("the encrypted state holds %q in plain text", s)
		}
	}
	if !strings.Contains(state, `"encrypted_data"`) || !strings.Contains(state, `"key_provider.pbkdf2.fulfiller"`) {
		t.Errorf("the state is not marked encrypted:\n%.400s", state)
	}

	// A wrong key cannot read the state.
	wrongEnv, err := statelock.EncryptionEnv(wrongPassphrase, "aes_gcm")
	if err != nil {
		t.Fatal(err)
	}
	res, log = run(t, ctx, simRun(t, string(key), tfrunner.Destroy, backend(key), "", withEnc(wrongEnv), nil))
	if res.Succeeded || res.Error.Class != tfrunner.Credentials {
		t.Errorf("destroy with a wrong key: %+v, want class %s\n%s", res.Error, tfrunner.Credentials, log)
	}
	t.Logf("wrong key: %s", res.Error)
	// Encryption is enforced: a plaintext state is not read as a fallback.
	res, log = run(t, ctx, simRun(t, string(plainKey), tfrunner.Destroy, backend(plainKey), "", withEnc(encEnv), nil))
	if res.Succeeded || res.Error.Class != tfrunner.Credentials {
		t.Errorf("encrypted run on a plaintext state: %+v, want class %s\n%s", res.Error, tfrunner.Credentials, log)
	}
	t.Logf("plaintext state: %s", res.Error)

	// The right key destroys.
	res, log = run(t, ctx, simRun(t, string(key), tfrunner.Destroy, backend(key), "", withEnc(encEnv), nil))
	if !res.Succeeded {
		t.Fatalf("encrypted destroy: %+v\n%s", res.Error, log)
	}
	if state := stateOf(key); strings.Contains(state, "terraform_data") || !strings.Contains(state, `"encrypted_data"`) {
		t.Errorf("state after destroy is not an encrypted empty state:\n%.400s", state)
	}
}

func TestEncryptionEnv(t *testing.T) {
	if _, err := statelock.EncryptionEnv("too short", "aes_gcm"); err == nil {
		t.Error("a passphrase under 16 characters was accepted")
	}
	if _, err := statelock.EncryptionEnv("sixteen chars ok!", "external"); err == nil {
		t.Error("an unsupported method was accepted")
	}
	env, err := statelock.EncryptionEnv("a ${b} c %{d} e 16+", "aes_gcm")
	if err != nil {
		t.Fatal(err)
	}
	cfg := env[statelock.EncryptionEnvVar]
	for _, want := range []string{`"passphrase":"a $${b} c %%{d} e 16+"`, `"enforced":true`, `"plan":{`, `"state":{`,
		`"keys":"key_provider.pbkdf2.fulfiller"`, `"method":"method.aes_gcm.fulfiller"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("configuration lacks %s: %s", want, cfg)
		}
	}
	if strings.Contains(cfg, "fallback") || strings.Contains(cfg, "unencrypted") {
		t.Errorf("configuration allows plaintext: %s", cfg)
	}
}

// TestKeyFingerprint: one passphrase, one fingerprint; another passphrase, another; none
// shows the passphrase.
func TestKeyFingerprint(t *testing.T) {
	a, err := statelock.KeyFingerprint(testPassphrase)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := statelock.KeyFingerprint(testPassphrase)
	b, _ := statelock.KeyFingerprint(wrongPassphrase)
	if a != again || a == b || !strings.HasPrefix(a, "pbkdf2-sha512:") || len(a) != len("pbkdf2-sha512:")+32 {
		t.Errorf("fingerprints %s, %s, %s", a, again, b)
	}
	if strings.Contains(a, testPassphrase) {
		t.Error("the fingerprint holds the passphrase")
	}
}
