package claims

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// backendValues are what a class's backend takes from Secrets.
type backendValues struct {
	// pgConnStr is the pg backend's connection string.
	pgConnStr string
	// env is the runs' environment for the backend and encryption (PG_CONN_STR, TF_ENCRYPTION).
	env map[string]string
}

// readBackend reads the Secrets (in namespace) that spec refers to and checks their values.
func readBackend(ctx context.Context, reader client.Reader, namespace string, spec v1alpha1.Backend) (backendValues, error) {
	v := backendValues{env: map[string]string{}}
	switch spec.TypeOrDefault() {
	case v1alpha1.BackendKubernetes:
	case v1alpha1.BackendPG:
		if spec.PG == nil {
			return v, backendError(v1alpha1.ReasonInvalidBackend, "backend type pg needs spec.backend.pg")
		}
		ref := spec.PG.ConnSecretRef
		conn, err := secretValue(ctx, reader, namespace, ref, v1alpha1.ReasonBackendSecretMissing, "pg connection string")
		if err != nil {
			return v, err
		}
		if err := statelock.ValidatePGConnString(conn); err != nil {
			return v, backendError(v1alpha1.ReasonInvalidBackendSecret, fmt.Sprintf("pg connection string in secret %s/%s key %s: %v", namespace, ref.Name, ref.Key, err))
		}
		v.pgConnStr = conn
		maps.Copy(v.env, statelock.PGConnEnv(conn))
	default:
		return v, backendError(v1alpha1.ReasonInvalidBackend, fmt.Sprintf("unsupported backend type %q", spec.Type))
	}
	if enc := spec.Encryption; enc != nil {
		passphrase, err := secretValue(ctx, reader, namespace, enc.KeySecretRef, v1alpha1.ReasonEncryptionKeyMissing, "state encryption key")
		if err != nil {
			return v, err
		}
		env, err := statelock.EncryptionEnv(passphrase, string(enc.MethodOrDefault()))
		if err != nil {
			return v, backendError(v1alpha1.ReasonInvalidEncryptionKey, fmt.Sprintf("state encryption key %s/%s key %s: %v", namespace, enc.KeySecretRef.Name, enc.KeySecretRef.Key, err))
		}
		maps.Copy(v.env, env)
	}
	return v, nil
}

// secretValue reads one non-empty key of a Secret; a missing Secret or key is a
// ConfigError of BackendReady
// with reason.
func secretValue(ctx context.Context, reader client.Reader, namespace string, ref v1alpha1.SecretKeyRef, reason, what string) (string, error) {
	secret := &corev1.Secret{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, secret)
	if apierrors.IsNotFound(err) {
		return "", backendError(reason, fmt.Sprintf("%s: secret %s/%s not found", what, namespace, ref.Name))
	}
	if err != nil {
		return "", fmt.Errorf("reading secret %s/%s: %w", namespace, ref.Name, err)
	}
	value, ok := secret.Data[ref.Key]
	if !ok || len(value) == 0 {
		return "", backendError(reason, fmt.Sprintf("%s: secret %s/%s has no key %s", what, namespace, ref.Name, ref.Key))
	}
	return string(value), nil
}

// backendSpec is the backend of the claim's class (the default when the class is gone).
func backendSpec(s *claimState) v1alpha1.Backend {
	if s.nc != nil {
		return s.nc.Spec.Backend
	}
	return v1alpha1.Backend{}
}

// runBackend is the backend part of a claim's run: where its state is, the workspace, and
// the environment with the backend's and the encryption's secrets.
func (c *FulfillmentController) runBackend(ctx context.Context, s *claimState) (tfrunner.Backend, string, map[string]string, error) {
	spec := backendSpec(s)
	values, err := readBackend(ctx, c.apiReader, c.opts.Namespace, spec)
	if err != nil {
		return tfrunner.Backend{}, "", nil, err
	}
	key := statelock.Key(s.f.Spec.StateKey)
	if spec.TypeOrDefault() == v1alpha1.BackendPG {
		return tfrunner.Backend{Type: string(v1alpha1.BackendPG), Config: statelock.PGBackend(spec.PGSchema())}, string(key), values.env, nil
	}
	return tfrunner.Backend{
		Type:   string(v1alpha1.BackendKubernetes),
		Config: statelock.KubernetesBackend(key, c.stateNamespace(s)),
	}, "", values.env, nil
}

// stateStore is where the claim's state is, for lock holders, existence and removal.
func (c *FulfillmentController) stateStore(ctx context.Context, s *claimState) (statelock.Store, error) {
	spec := backendSpec(s)
	if spec.TypeOrDefault() != v1alpha1.BackendPG {
		return statelock.KubernetesStore{Reader: c.apiReader, Writer: c.kube, Namespace: c.stateNamespace(s)}, nil
	}
	values, err := readBackend(ctx, c.apiReader, c.opts.Namespace, spec)
	if err != nil {
		return nil, err
	}
	return statelock.PGStore{ConnStr: values.pgConnStr, Schema: spec.PGSchema()}, nil
}
