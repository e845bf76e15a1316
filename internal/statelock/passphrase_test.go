// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestEnsurePassphrase: the controller makes the passphrase Secret once, with a random
// passphrase, and never changes one that exists (another replica's, or the user's).
func TestEnsurePassphrase(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	created, err := EnsurePassphrase(ctx, client, "fulfiller", "state-key", "passphrase")
	if err != nil || !created {
		t.Fatalf("first start: created=%v, %v", created, err)
	}
	first, err := client.CoreV1().Secrets("fulfiller").Get(ctx, "state-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := string(first.Data["passphrase"])
	if len(p) != generatedPassphraseLen || len(first.OwnerReferences) != 0 {
		t.Fatalf("passphrase of %d characters, owners %v", len(p), first.OwnerReferences)
	}
	if _, err := EncryptionEnv(p, "aes_gcm"); err != nil {
		t.Errorf("OpenTofu's pbkdf2 would refuse it: %v", err)
	}
	created, err = EnsurePassphrase(ctx, client, "fulfiller", "state-key", "passphrase")
	again, _ := client.CoreV1().Secrets("fulfiller").Get(ctx, "state-key", metav1.GetOptions{})
	if err != nil || created || string(again.Data["passphrase"]) != p {
		t.Fatalf("second start: created=%v, %v; passphrase kept: %v", created, err, string(again.Data["passphrase"]) == p)
	}
	// Two passphrases drawn are not the same.
	other := fake.NewClientset()
	if _, err := EnsurePassphrase(ctx, other, "fulfiller", "state-key", "passphrase"); err != nil {
		t.Fatal(err)
	}
	if s, _ := other.CoreV1().Secrets("fulfiller").Get(ctx, "state-key", metav1.GetOptions{}); string(s.Data["passphrase"]) == p {
		t.Error("two passphrases drawn alike")
	}

	// A user's Secret is left alone, even when it cannot be used.
	for name, data := range map[string]map[string][]byte{
		"no-key": {"other": []byte("0123456789abcdef0123")},
		"short":  {"passphrase": []byte("short")},
	} {
		client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: name}, Data: data})
		created, err := EnsurePassphrase(ctx, client, "fulfiller", name, "passphrase")
		got, _ := client.CoreV1().Secrets("fulfiller").Get(ctx, name, metav1.GetOptions{})
		if !errors.Is(err, ErrUnusablePassphraseSecret) || created || len(got.Data) != 1 || (name == "short" && !errors.Is(err, ErrInvalidPassphrase)) {
			t.Errorf("%s: created=%v, %v, data %v", name, created, err, got.Data)
		}
	}
}
