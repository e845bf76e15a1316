// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"fmt"
	"net/http"
)

// Error codes of the Hetzner Cloud API (docs.hetzner.cloud "Errors"; hcloud-go's ErrorCode
// constants) that the stand-in answers with.
const (
	CodeUnauthorized          = "unauthorized"
	CodeForbidden             = "forbidden"
	CodeInvalidInput          = "invalid_input"
	CodeJSONError             = "json_error"
	CodeLocked                = "locked"
	CodeNotFound              = "not_found"
	CodeRateLimitExceeded     = "rate_limit_exceeded"
	CodeResourceLimitExceeded = "resource_limit_exceeded"
	CodeResourceUnavailable   = "resource_unavailable"
	CodeServerError           = "server_error"
	CodeServiceError          = "service_error"
	CodeUniquenessError       = "uniqueness_error"
	CodeConflict              = "conflict"
	CodePlacementError        = "placement_error"
	CodeNoSubnetAvailable     = "no_subnet_available"
	CodeServerAlreadyAttached = "server_already_attached"
	CodeDeprecatedAPIEndpoint = "deprecated_api_endpoint"
	CodeUnavailable           = "unavailable"
	CodeMaintenance           = "maintenance"
	CodeTimeout               = "timeout"
	CodeResourceInUse         = "resource_in_use"
)

// statusOf is the HTTP status the API answers an error code with.
var statusOf = map[string]int{
	CodeUnauthorized:          http.StatusUnauthorized,
	CodeForbidden:             http.StatusForbidden,
	CodeInvalidInput:          http.StatusBadRequest,
	CodeJSONError:             http.StatusBadRequest,
	CodeLocked:                http.StatusLocked,
	CodeNotFound:              http.StatusNotFound,
	CodeRateLimitExceeded:     http.StatusTooManyRequests,
	CodeResourceLimitExceeded: http.StatusForbidden,
	CodeResourceUnavailable:   http.StatusForbidden,
	CodeServerError:           http.StatusInternalServerError,
	CodeServiceError:          http.StatusServiceUnavailable,
	CodeUniquenessError:       http.StatusConflict,
	CodeConflict:              http.StatusConflict,
	CodePlacementError:        http.StatusPreconditionFailed,
	CodeNoSubnetAvailable:     http.StatusPreconditionFailed,
	CodeServerAlreadyAttached: http.StatusPreconditionFailed,
	CodeDeprecatedAPIEndpoint: http.StatusGone,
	CodeUnavailable:           http.StatusServiceUnavailable,
	CodeMaintenance:           http.StatusServiceUnavailable,
	CodeTimeout:               http.StatusGatewayTimeout,
	CodeResourceInUse:         http.StatusPreconditionFailed,
}

// apiError is an error answer: {"error": {"code", "message", "details"}}.
type apiError struct {
	status  int
	code    string
	message string
	details any
}

func (e *apiError) Error() string { return e.message + " (" + e.code + ")" }

func newError(code, format string, args ...any) *apiError {
	status, ok := statusOf[code]
	if !ok {
		status = http.StatusBadRequest
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// invalidInput is an invalid_input error about one field, with the details the API gives
// (hcloud-go and the terraform provider read details.fields).
func invalidInput(field, problem string) *apiError {
	e := newError(CodeInvalidInput, "invalid input in field '%s'", field)
	e.details = map[string]any{"fields": []map[string]any{{"name": field, "messages": []string{problem}}}}
	return e
}

func notFound(what string, id any) *apiError {
	return newError(CodeNotFound, "%s with ID %v not found", what, id)
}
