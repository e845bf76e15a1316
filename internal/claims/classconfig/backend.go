// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
)

// BackendValues are what a class's backend takes from Secrets.
type BackendValues struct {
	// PGConnStr is the pg backend's connection string.
	PGConnStr string
	// Env is the runs' environment for the backend and encryption (PG_CONN_STR, TF_ENCRYPTION).
	Env map[string]string
	// Passphrase is the state encryption's passphrase ("": no encryption).
	Passphrase string
}

// ReadBackend reads the Secrets (in namespace) that spec refers to and checks their values.
func ReadBackend(ctx context.Context, reader client.Reader, namespace string, spec v1alpha1.Backend) (BackendValues, error) {
	v := BackendValues{Env: map[string]string{}}
	switch spec.TypeOrDefault() {
	case v1alpha1.BackendKubernetes:
	case v1alpha1.BackendPG:
		if spec.PG == nil {
			return v, BackendError(v1alpha1.ReasonInvalidBackend, "backend type pg needs spec.backend.pg")
		}
		ref := spec.PG.ConnSecretRef
		conn, err := secretValue(ctx, reader, namespace, ref, v1alpha1.ReasonBackendSecretMissing, "pg connection string")
		if err != nil {
			return v, err
		}
		if err := statelock.ValidatePGConnString(conn); err != nil {
			return v, BackendError(v1alpha1.ReasonInvalidBackendSecret, fmt.Sprintf("pg connection string in secret %s/%s key %s: %v", namespace, ref.Name, ref.Key, err))
		}
		v.PGConnStr = conn
		maps.Copy(v.Env, statelock.PGConnEnv(conn))
	default:
		return v, BackendError(v1alpha1.ReasonInvalidBackend, fmt.Sprintf("unsupported backend type %q", spec.Type))
	}
	if enc := spec.Encryption; enc != nil {
		passphrase, err := secretValue(ctx, reader, namespace, enc.KeySecretRef, v1alpha1.ReasonEncryptionKeyMissing, "state encryption key")
		if err != nil {
			return v, err
		}
		env, err := statelock.EncryptionEnv(passphrase, string(enc.MethodOrDefault()))
		if err != nil {
			return v, BackendError(v1alpha1.ReasonInvalidEncryptionKey, fmt.Sprintf("state encryption key %s/%s key %s: %v", namespace, enc.KeySecretRef.Name, enc.KeySecretRef.Key, err))
		}
		maps.Copy(v.Env, env)
		v.Passphrase = passphrase
	}
	return v, nil
}

// secretValue reads one non-empty key of a Secret; a missing Secret or key is a ConfigError
// of BackendReady with reason.
func secretValue(ctx context.Context, reader client.Reader, namespace string, ref v1alpha1.SecretKeyRef, reason, what string) (string, error) {
	secret := &corev1.Secret{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, secret)
	if apierrors.IsNotFound(err) {
		return "", BackendError(reason, fmt.Sprintf("%s: secret %s/%s not found", what, namespace, ref.Name))
	}
	if err != nil {
		return "", fmt.Errorf("reading secret %s/%s: %w", namespace, ref.Name, err)
	}
	value, ok := secret.Data[ref.Key]
	if !ok || len(value) == 0 {
		return "", BackendError(reason, fmt.Sprintf("%s: secret %s/%s has no key %s", what, namespace, ref.Name, ref.Key))
	}
	return string(value), nil
}
