// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock

import (
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// EncryptionEnvVar is the environment variable OpenTofu reads its encryption configuration
// from; it is merged with (and overrides) the module's own `terraform { encryption {} }`.
const EncryptionEnvVar = "TF_ENCRYPTION"

// MinPassphraseLen is the pbkdf2 key provider's minimum passphrase length.
const MinPassphraseLen = 16

// ErrInvalidPassphrase marks a passphrase the pbkdf2 key provider refuses.
var ErrInvalidPassphrase = errors.New("invalid encryption passphrase")

// Names of the key provider and method in the configuration. Renaming them makes existing
// states unreadable (OpenTofu records them in the encrypted state), so they never change.
const (
	encryptionKeyName    = "fulfiller"
	encryptionMethodName = "fulfiller"
)

// EncryptionEnv is the environment that makes a run encrypt its state and plan with a key
// derived from passphrase by the pbkdf2 key provider, using method (aes_gcm, the only one; the class's
// BackendEncryption.MethodOrDefault). Both
// targets are enforced: tofu refuses to write an unencrypted state or plan, and reading a
// plaintext state fails, since no fallback is configured. The configuration is JSON, so the
// passphrase needs no HCL quoting; template sequences in it are escaped.
func EncryptionEnv(passphrase, method string) (map[string]string, error) {
	if utf8.RuneCountInString(passphrase) < MinPassphraseLen {
		return nil, fmt.Errorf("%w: it must have at least %d characters", ErrInvalidPassphrase, MinPassphraseLen)
	}
	if strings.ContainsRune(passphrase, 0) || !utf8.ValidString(passphrase) {
		return nil, fmt.Errorf("%w: it must be UTF-8 text without NUL characters", ErrInvalidPassphrase)
	}
	if method != "aes_gcm" {
		return nil, fmt.Errorf("unsupported encryption method %q", method)
	}
	// In the JSON syntax, a reference is a string holding a bare traversal.
	methodRef := fmt.Sprintf("method.%s.%s", method, encryptionMethodName)
	target := map[string]any{"method": methodRef, "enforced": true}
	cfg := map[string]any{
		"key_provider": map[string]any{"pbkdf2": map[string]any{encryptionKeyName: map[string]any{
			"passphrase": escapeTemplate(passphrase),
		}}},
		"method": map[string]any{method: map[string]any{encryptionMethodName: map[string]any{
			"keys": "key_provider.pbkdf2." + encryptionKeyName,
		}}},
		"state": target,
		"plan":  target,
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding encryption configuration: %w", err)
	}
	return map[string]string{EncryptionEnvVar: string(data)}, nil
}

// escapeTemplate keeps "${" and "%{" in a JSON string literal from starting an HCL template
// sequence.
func escapeTemplate(s string) string {
	return strings.NewReplacer("${", "$${", "%{", "%%{").Replace(s)
}

// Parameters of a key fingerprint: pbkdf2 as OpenTofu's key provider derives the key by
// default (sha512, 600 000 iterations), so a fingerprint is no cheaper to guess a passphrase
// from than a state encrypted with it.
const (
	fingerprintIterations = 600_000
	fingerprintLen        = 16
	fingerprintSalt       = "fulfiller.sh/state-key-fingerprint"
)

// fingerprints caches KeyFingerprint by the passphrase's SHA-256, which is kept only in memory.
var fingerprints sync.Map

// KeyFingerprint identifies a passphrase without revealing it: recorded with a claim whose
// state it encrypts, it tells a passphrase changed in its Secret from the one the state was
// written with before any run fails to decrypt the state.
func KeyFingerprint(passphrase string) (string, error) {
	id := sha256.Sum256([]byte(passphrase))
	if fp, ok := fingerprints.Load(id); ok {
		return fp.(string), nil
	}
	key, err := pbkdf2.Key(sha512.New, passphrase, []byte(fingerprintSalt), fingerprintIterations, fingerprintLen)
	if err != nil {
		return "", fmt.Errorf("deriving the key fingerprint: %w", err)
	}
	fp := "pbkdf2-sha512:" + hex.EncodeToString(key)
	fingerprints.Store(id, fp)
	return fp, nil
}
