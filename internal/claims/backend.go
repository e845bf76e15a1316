// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

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
	// passphrase is the state encryption's passphrase ("": no encryption).
	passphrase string
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
		v.passphrase = passphrase
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

// runBackend is the backend part of a claim's run: where its state is, the workspace, and
// the environment with the backend's and the encryption's secrets.
func (c *FulfillmentController) runBackend(ctx context.Context, s *claimState) (tfrunner.Backend, string, map[string]string, error) {
	spec, values, err := c.claimBackend(ctx, s)
	if err != nil {
		return tfrunner.Backend{}, "", nil, err
	}
	if err := checkEncryptionKey(s.f, c.opts.Namespace, spec, values); err != nil {
		return tfrunner.Backend{}, "", nil, err
	}
	key := statelock.Key(s.f.Spec.StateKey)
	if spec.TypeOrDefault() == v1alpha1.BackendPG {
		return tfrunner.Backend{Type: string(v1alpha1.BackendPG), Config: statelock.PGBackend(spec.PGSchema())}, string(key), values.env, nil
	}
	return tfrunner.Backend{
		Type:   string(v1alpha1.BackendKubernetes),
		Config: statelock.KubernetesBackend(key, c.stateNamespace(s)),
		// The state Secret and lock Lease carry the claim's UID, as its runs do.
		Maps: map[string]map[string]string{"labels": stateLabels(s.f)},
	}, "", values.env, nil
}

// stateStore is where the claim's state is, for lock holders, existence and removal.
func (c *FulfillmentController) stateStore(ctx context.Context, s *claimState) (statelock.Store, error) {
	spec := c.runSettings(s).Backend
	if spec.TypeOrDefault() != v1alpha1.BackendPG {
		return statelock.KubernetesStore{Reader: c.apiReader, Writer: c.kube, Namespace: c.stateNamespace(s)}, nil
	}
	spec, values, err := c.claimBackend(ctx, s)
	if err != nil {
		return nil, err
	}
	return statelock.PGStore{ConnStr: values.pgConnStr, Schema: spec.PGSchema()}, nil
}

// claimBackend reads the Secrets of the backend the claim recorded. When the encryption key
// Secret it recorded is gone while its class names another now (the Secret was renamed), the
// class's is used if it holds the passphrase the claim's state was written with (its
// fingerprint; checkEncryptionKey). Other Secrets are not replaced: another pg connection
// string or other credentials may reach another database or account, where the claim's
// state or machine would not be found and the machine would be lost; the claim waits for the
// Secret it recorded.
func (c *FulfillmentController) claimBackend(ctx context.Context, s *claimState) (v1alpha1.Backend, backendValues, error) {
	spec := c.runSettings(s).Backend
	values, err := readBackend(ctx, c.apiReader, c.opts.Namespace, spec)
	ce, ok := asConfigError(err)
	if !ok || ce.Reason != v1alpha1.ReasonEncryptionKeyMissing || s.nc == nil {
		return spec, values, err
	}
	if s.f.Status.EncryptionKeyFingerprint == "" && len(s.f.Status.Runs) > 0 {
		return spec, values, err // a state written before fingerprints: nothing to check a key against
	}
	recorded, class := spec.Encryption, s.nc.Spec.Backend.Encryption
	if recorded == nil || class == nil || recorded.KeySecretRef == class.KeySecretRef || recorded.MethodOrDefault() != class.MethodOrDefault() {
		return spec, values, err
	}
	renamed := *spec.DeepCopy()
	renamed.Encryption.KeySecretRef = class.KeySecretRef
	renamedValues, renamedErr := readBackend(ctx, c.apiReader, c.opts.Namespace, renamed)
	if renamedErr != nil {
		return spec, values, err
	}
	log.FromContext(ctx).Info("the encryption key secret the claim recorded is gone; trying its class's",
		"recorded", recorded.KeySecretRef.Name, "class", class.KeySecretRef.Name)
	return renamed, renamedValues, nil
}

// stateLabels are the labels of a claim's state objects (the kubernetes backend's Secret and
// Lease): its claim's UID, as on its runs, so what a claim left can be found by the claim.
func stateLabels(f *v1alpha1.Fulfillment) map[string]string {
	return map[string]string{tfrunner.LabelNodeClaimUID: f.Spec.NodeClaimUID}
}

// checkEncryptionKey compares the passphrase a run would use with the one the claim's state
// was written with (its recorded fingerprint), and records it for the claim's first run. A
// changed passphrase is a ConfigError: no run starts that could only fail to decrypt.
func checkEncryptionKey(f *v1alpha1.Fulfillment, namespace string, spec v1alpha1.Backend, values backendValues) error {
	if spec.Encryption == nil {
		return nil
	}
	fp, err := statelock.KeyFingerprint(values.passphrase)
	if err != nil {
		return err
	}
	recorded := f.Status.EncryptionKeyFingerprint
	if recorded == "" || len(f.Status.Runs) == 0 {
		// No run has written a state yet.
		f.Status.EncryptionKeyFingerprint = fp
		return nil
	}
	if fp != recorded {
		ref := spec.Encryption.KeySecretRef
		return backendError(v1alpha1.ReasonEncryptionKeyChanged, fmt.Sprintf(
			"the passphrase in secret %s/%s key %s is not the one this claim's state was written with "+
				"(key fingerprint %s, recorded %s): put that passphrase back to update or destroy the machine",
			namespace, ref.Name, ref.Key, fp, recorded))
	}
	return nil
}
