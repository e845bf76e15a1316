// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

// BackendPG keeps each claim's state as a row of a PostgreSQL table (OpenTofu's pg backend),
// locked with PostgreSQL advisory locks, which end with the session that holds them.
const BackendPG BackendType = "pg"

// SecretKeyRef names one key of a Secret in the fulfiller's namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key in the Secret's data.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// EncryptionMethod is how OpenTofu encrypts state and plans.
// +kubebuilder:validation:Enum=aes_gcm
type EncryptionMethod string

const EncryptionAESGCM EncryptionMethod = "aes_gcm"

// BackendEncryption turns on OpenTofu's state and plan encryption for every claim of the
// class. The key is a passphrase (at least 16 characters) from which the pbkdf2 key provider
// derives the key; runs get it in their TF_ENCRYPTION environment, never on a command line.
// Encryption is enforced: a run never writes or reads an unencrypted state or plan.
type BackendEncryption struct {
	// KeySecretRef is the Secret key holding the passphrase.
	KeySecretRef SecretKeyRef `json:"keySecretRef"`
	// Method of encryption. The API server stores its default, aes_gcm (MethodOrDefault).
	// +kubebuilder:default=aes_gcm
	// +optional
	Method EncryptionMethod `json:"method,omitempty"`
}

// PGBackendSpec configures the pg backend. All claims share one schema; each claim's state is
// the OpenTofu workspace named after the claim.
type PGBackendSpec struct {
	// ConnSecretRef is the Secret key holding the connection string
	// (postgres://user:password@host:5432/db?sslmode=require). Runs get it as PG_CONN_STR.
	ConnSecretRef SecretKeyRef `json:"connSecretRef"`
	// SchemaName is the schema holding the states table. The API server stores its default,
	// fulfiller (Backend.PGSchema), so that it cannot change afterwards (TofuNodeClassSpec's
	// rules).
	// +kubebuilder:default=fulfiller
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]{0,62}$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	SchemaName string `json:"schemaName,omitempty"`
}

// LabelCredentials opts a Secret in to being named by a class's spec.credentials: its value
// must be "true". Other Secrets of the fulfiller's namespace (the passphrase, claims' user
// data) can never become a run's environment.
const LabelCredentials = Group + "/credentials"

// CredentialsSource is a Secret whose keys become the environment of the class's runs.
type CredentialsSource struct {
	// SecretName is a Secret in the fulfiller's namespace, labelled fulfiller.sh/credentials:
	// "true".
	// +kubebuilder:validation:MinLength=1
	SecretName string `json:"secretName"`
}
