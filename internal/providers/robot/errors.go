// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Error codes of the Robot webservice that the fulfiller acts on (robot.hetzner.com/doc/
// webservice/en.html, the "Errors" table of each endpoint). UNAUTHORIZED is not in the
// documentation's tables; the documentation says only that a failed login is a 401.
const (
	CodeUnauthorized           = "UNAUTHORIZED"
	CodeRateLimitExceeded      = "RATE_LIMIT_EXCEEDED"
	CodeInvalidInput           = "INVALID_INPUT"
	CodeNotFound               = "NOT_FOUND"
	CodeServerNotFound         = "SERVER_NOT_FOUND"
	CodeBootNotAvailable       = "BOOT_NOT_AVAILABLE"
	CodeBootActivationFailed   = "BOOT_ACTIVATION_FAILED"
	CodeBootDeactivationFailed = "BOOT_DEACTIVATION_FAILED"
	CodeResetNotAvailable      = "RESET_NOT_AVAILABLE"
	CodeResetManualActive      = "RESET_MANUAL_ACTIVE"
	CodeResetFailed            = "RESET_FAILED"
	CodeKeyAlreadyExists       = "KEY_ALREADY_EXISTS"
	CodeKeyCreateFailed        = "KEY_CREATE_FAILED"
	CodeInternalError          = "INTERNAL_ERROR"
)

// The conditions a class or claim shows; test them with errors.Is.
var (
	// ErrInvalidCredentials: the webservice rejected the user and password (401).
	ErrInvalidCredentials = errors.New("the Robot webservice rejected the credentials")
	// ErrServerNotFound: no server of that number in this Robot account.
	ErrServerNotFound = errors.New("no such server in this Robot account")
)

// APIError is the webservice's error envelope: {"error":{"status","code","message"}}, with
// missing/invalid for INVALID_INPUT and max_request/interval for RATE_LIMIT_EXCEEDED.
type APIError struct {
	Status  int      `json:"status"`
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Missing []string `json:"missing,omitempty"`
	Invalid []string `json:"invalid,omitempty"`
	// MaxRequest and Interval (seconds) are the budget a RATE_LIMIT_EXCEEDED was against.
	MaxRequest int `json:"max_request,omitempty"`
	Interval   int `json:"interval,omitempty"`
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("robot webservice: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
	if len(e.Missing) > 0 {
		msg += "; missing " + strings.Join(e.Missing, ", ")
	}
	if len(e.Invalid) > 0 {
		msg += "; invalid " + strings.Join(e.Invalid, ", ")
	}
	return msg
}

// Is maps the envelope to the package's condition errors.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrInvalidCredentials:
		return e.Status == 401 || e.Code == CodeUnauthorized
	case ErrServerNotFound:
		return e.Code == CodeServerNotFound
	}
	return false
}

// RateLimitedError: an endpoint's request budget is used up, by this client (it did not
// send the request) or, as the webservice answered RATE_LIMIT_EXCEEDED, by someone else
// using the same account. ResetAt is when a request is certain to be accepted again.
type RateLimitedError struct {
	Endpoint string
	Budget   Budget
	ResetAt  time.Time
	// API is the webservice's answer when it refused the request; nil when the client held
	// the request back itself.
	API *APIError
}

func (e *RateLimitedError) Error() string {
	who := "this client's accounting"
	if e.API != nil {
		who = "the webservice (" + CodeRateLimitExceeded + ")"
	}
	return fmt.Sprintf("robot webservice rate limit: %s allows %s, used up according to %s; next request at %s",
		e.Endpoint, e.Budget, who, e.ResetAt.UTC().Format(time.RFC3339))
}

func (e *RateLimitedError) Unwrap() error {
	if e.API == nil {
		return nil
	}
	return e.API
}

// IsCode reports whether err is (or wraps) an APIError with the given code.
func IsCode(err error, code string) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.Code == code
}
