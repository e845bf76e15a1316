// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// backend is the backend part of a claim's run: where its state is, the workspace, and
// the environment with the backend's and the encryption's secrets.
func (r *Runs) backend(ctx context.Context, c *Claim) (tfrunner.Backend, string, map[string]string, error) {
	spec, values, err := r.claimBackend(ctx, c)
	if err != nil {
		return tfrunner.Backend{}, "", nil, err
	}
	if err := checkEncryptionKey(c.F, r.opts.Namespace, spec, values); err != nil {
		return tfrunner.Backend{}, "", nil, err
	}
	key := statelock.Key(c.F.Spec.StateKey)
	if spec.TypeOrDefault() == v1alpha1.BackendPG {
		return tfrunner.Backend{Type: string(v1alpha1.BackendPG), Config: statelock.PGBackend(spec.PGSchema())}, string(key), values.Env, nil
	}
	return tfrunner.Backend{
		Type:   string(v1alpha1.BackendKubernetes),
		Config: statelock.KubernetesBackend(key, r.stateNamespace(c)),
		// The state Secret and lock Lease carry the claim's UID, as its runs do.
		Maps: map[string]map[string]string{"labels": stateLabels(c.F)},
	}, "", values.Env, nil
}

// StateStore is where the claim's state is, for lock holders, existence and removal.
func (r *Runs) StateStore(ctx context.Context, c *Claim) (statelock.Store, error) {
	spec := r.Settings(c).Backend
	if spec.TypeOrDefault() != v1alpha1.BackendPG {
		return statelock.KubernetesStore{Reader: r.apiReader, Writer: r.kube, Namespace: r.stateNamespace(c)}, nil
	}
	spec, values, err := r.claimBackend(ctx, c)
	if err != nil {
		return nil, err
	}
	return statelock.PGStore{ConnStr: values.PGConnStr, Schema: spec.PGSchema()}, nil
}

// claimBackend reads the Secrets of the backend the claim recorded. When the encryption key
// Secret it recorded is gone while its class names another now (the Secret was renamed), the
// class's is used if it holds the passphrase the claim's state was written with (its
// fingerprint; checkEncryptionKey). Other Secrets are not replaced: another pg connection
// string or other credentials may reach another database or account, where the claim's
// state or machine would not be found and the machine would be lost; the claim waits for the
// Secret it recorded.
func (r *Runs) claimBackend(ctx context.Context, c *Claim) (v1alpha1.Backend, classconfig.BackendValues, error) {
	spec := r.Settings(c).Backend
	values, err := classconfig.ReadBackend(ctx, r.apiReader, r.opts.Namespace, spec)
	ce, ok := classconfig.AsConfigError(err)
	if !ok || ce.Reason != v1alpha1.ReasonEncryptionKeyMissing || c.Class == nil {
		return spec, values, err
	}
	if c.F.Status.EncryptionKeyFingerprint == "" && len(c.F.Status.Runs) > 0 {
		return spec, values, err // a state written before fingerprints: nothing to check a key against
	}
	recorded, class := spec.Encryption, c.Class.Spec.Backend.Encryption
	if recorded == nil || class == nil || recorded.KeySecretRef == class.KeySecretRef || recorded.MethodOrDefault() != class.MethodOrDefault() {
		return spec, values, err
	}
	renamed := *spec.DeepCopy()
	renamed.Encryption.KeySecretRef = class.KeySecretRef
	renamedValues, renamedErr := classconfig.ReadBackend(ctx, r.apiReader, r.opts.Namespace, renamed)
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
	return map[string]string{keys.LabelNodeClaimUID: f.Spec.NodeClaimUID}
}

// checkEncryptionKey compares the passphrase a run would use with the one the claim's state
// was written with (its recorded fingerprint), and records it for the claim's first run. A
// changed passphrase is a ConfigError: no run starts that could only fail to decrypt.
func checkEncryptionKey(f *v1alpha1.Fulfillment, namespace string, spec v1alpha1.Backend, values classconfig.BackendValues) error {
	if spec.Encryption == nil {
		return nil
	}
	fp, err := statelock.KeyFingerprint(values.Passphrase)
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
		return classconfig.BackendError(v1alpha1.ReasonEncryptionKeyChanged, fmt.Sprintf(
			"the passphrase in secret %s/%s key %s is not the one this claim's state was written with "+
				"(key fingerprint %s, recorded %s): put that passphrase back to update or destroy the machine",
			namespace, ref.Name, ref.Key, fp, recorded))
	}
	return nil
}
