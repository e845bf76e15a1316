// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrUnusablePassphraseSecret: the passphrase Secret exists but holds no usable passphrase;
// it is left as it is.
var ErrUnusablePassphraseSecret = errors.New("the passphrase secret cannot be used")

// generatedPassphraseLen is the length of a passphrase EnsurePassphrase makes: 48 characters
// of 62 give 285 bits.
const generatedPassphraseLen = 48

// EnsurePassphrase makes sure the Secret name in namespace holds a state encryption
// passphrase under key. When the Secret does not exist it creates it with a random
// passphrase (crypto/rand) and returns created; a Secret that exists is never changed: one
// without the key, or with a passphrase too short, is an error (its classes show
// EncryptionKeyMissing or InvalidEncryptionKey). The Secret belongs to nothing (no owner, no
// helm release), so uninstalling the fulfiller keeps it: without it no state encrypted with
// it can be read.
func EnsurePassphrase(ctx context.Context, client kubernetes.Interface, namespace, name, key string) (created bool, err error) {
	secrets := client.CoreV1().Secrets(namespace)
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return false, checkPassphrase(existing, key)
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading passphrase secret %s/%s: %w", namespace, name, err)
	}
	passphrase, err := randomPassphrase(generatedPassphraseLen)
	if err != nil {
		return false, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "fulfiller", "app.kubernetes.io/component": "state-encryption"},
			Annotations: map[string]string{
				"fulfiller.sh/note": "The passphrase of OpenTofu's state encryption, made by the fulfiller controller. " +
					"Back it up: without it no state encrypted with it can be read. The fulfiller never changes or deletes it.",
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{key: []byte(passphrase)},
	}
	_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) { // another replica was first: keep its passphrase
		existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading passphrase secret %s/%s: %w", namespace, name, err)
		}
		return false, checkPassphrase(existing, key)
	}
	if err != nil {
		return false, fmt.Errorf("creating passphrase secret %s/%s: %w", namespace, name, err)
	}
	return true, nil
}

func checkPassphrase(secret *corev1.Secret, key string) error {
	value, ok := secret.Data[key]
	if !ok {
		return fmt.Errorf("%w: secret %s/%s has no key %s", ErrUnusablePassphraseSecret, secret.Namespace, secret.Name, key)
	}
	if utf8.RuneCount(value) < MinPassphraseLen {
		return fmt.Errorf("%w: secret %s/%s key %s: %w: it must have at least %d characters", ErrUnusablePassphraseSecret, secret.Namespace, secret.Name, key, ErrInvalidPassphrase, MinPassphraseLen)
	}
	return nil
}

// randomPassphrase draws n letters and digits uniformly from crypto/rand.
func randomPassphrase(n int) (string, error) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]byte, 0, n)
	buf := make([]byte, 64)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("drawing a passphrase: %w", err)
		}
		for _, b := range buf {
			// 248 is the largest multiple of 62 below 256: higher bytes would skew the draw.
			if b < 248 && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}
