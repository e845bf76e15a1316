// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"errors"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// ConfigError: the class's configuration cannot be used as it is: a Secret it names is
// missing, a value in one is unusable, or its settings do not fit together. Condition is the
// TofuNodeClass condition that shows it (BackendReady, CredentialsReady) and Reason that
// condition's reason; a claim whose run cannot be built for it shows the same reason. The
// message names Secrets and keys, never their values.
type ConfigError struct {
	Condition string
	Reason    string
	Message   string
}

func (e *ConfigError) Error() string { return e.Message }

// BackendError is a ConfigError of BackendReady.
func BackendError(reason, message string) *ConfigError {
	return &ConfigError{Condition: v1alpha1.ConditionBackendReady, Reason: reason, Message: message}
}

func credentialsError(reason, message string) *ConfigError {
	return &ConfigError{Condition: v1alpha1.ConditionCredentialsReady, Reason: reason, Message: message}
}

// AsConfigError returns the ConfigError in err's chain.
func AsConfigError(err error) (*ConfigError, bool) {
	var ce *ConfigError
	ok := errors.As(err, &ce)
	return ce, ok
}
