// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robotrules

import (
	"strings"

	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// reasonClasses map the reasons `fulfiller robot` prints to the runner's failure classes.
// A server that cannot be used now (not provably ours, a failed install, no rescue or reset
// option) is insufficient capacity: the claim is planned onto another server, and the pool
// counts the failure towards the server's quarantine.
var reasonClasses = map[string]tfrunner.ErrorClass{
	ReasonInvalidCredentials: tfrunner.Credentials,
	ReasonServerNotFound:     tfrunner.InvalidModule,
	ReasonInvalidInput:       tfrunner.InvalidModule,
	ReasonRateLimited:        tfrunner.Transient,
	ReasonRescueUnreachable:  tfrunner.Transient,
	ReasonInventory:          tfrunner.Transient,
	ReasonHostKeyMismatch:    tfrunner.Capacity,
	ReasonNotStandby:         tfrunner.Capacity,
	ReasonInstallFailed:      tfrunner.Capacity,
	ReasonBootNotAvailable:   tfrunner.Capacity,
	ReasonResetNotAvailable:  tfrunner.Capacity,
}

// errorPrefix starts the line `fulfiller robot` prints on failure.
const errorPrefix = "robot error "

// Rules classify the diagnostics of modules/hetzner-robot runs; they are the family's error
// rules for the runner (the family seam's tfrunner Rules).
type Rules struct{}

// Classify finds the reason `fulfiller robot` printed in a failed provisioner's output.
func (Rules) Classify(d tfrunner.Diagnostic) (tfrunner.ErrorClass, bool) {
	reason, ok := ReasonOf(d.Detail)
	if !ok {
		return "", false
	}
	class, ok := reasonClasses[reason]
	if !ok {
		return tfrunner.Unknown, true
	}
	return class, true
}

// ReasonOf returns the reason of the last "robot error <Reason>:" line in text.
func ReasonOf(text string) (string, bool) {
	i := strings.LastIndex(text, errorPrefix)
	if i < 0 {
		return "", false
	}
	rest := text[i+len(errorPrefix):]
	reason, _, ok := strings.Cut(rest, ":")
	if !ok || reason == "" || strings.ContainsAny(reason, " \n") {
		return "", false
	}
	return reason, true
}

// Reasons the command prints ahead of its error, which Rules classifies (`fulfiller robot`, internal/providers/robot).
const (
	ReasonInvalidCredentials = "InvalidCredentials"
	ReasonServerNotFound     = "ServerNotFound"
	ReasonRateLimited        = "RateLimited"
	ReasonHostKeyMismatch    = "HostKeyMismatch"
	ReasonNotStandby         = "NotInStandby"
	ReasonInstallFailed      = "InstallFailed"
	ReasonRescueUnreachable  = "RescueUnreachable"
	ReasonBootNotAvailable   = "RescueNotAvailable"
	ReasonResetNotAvailable  = "ResetNotAvailable"
	ReasonInvalidInput       = "InvalidInput"
	ReasonInventory          = "InventoryChanged"
	ReasonFailed             = "ActivationFailed"
)
