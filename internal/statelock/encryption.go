package statelock

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
