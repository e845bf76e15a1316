// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// The Hetzner Cloud API's rate limit (docs.hetzner.cloud, "Rate Limiting"): 3600 requests per
// hour per project, refilled by one a second, shared by everything that uses the project's
// tokens.
const ProjectRequestsPerHour = 3600

// What one run of modules/hetzner-cloud asks of the API, by what the hcloud provider does
// (docs/benchmarks.md, "Hetzner Cloud API requests per node", counts them against the
// stand-in; BenchmarkHcloudRequestsPerNode fails when a run asks for more).
//
// An apply: the server type and image look-ups, the create, its action's polls (the module
// polls after 5, 15 and 35 s: three for a create of up to 35 s), one poll of the start that
// follows it and the read of the new server; then what the module's optional settings add:
// an SSH key's look-up, the placement group's, a network attach with its poll, and a fourth
// poll for a create of up to 75 s.
//
// A destroy: the refresh's read, the delete and its action's poll; then the two look-ups
// that image_selector's data sources make again.
const (
	applyRequestsOfDefaults   = 8
	applyRequestsOfSettings   = 5
	destroyRequestsOfDefaults = 3
	destroyRequestsOfSettings = 2

	ApplyRequests   = applyRequestsOfDefaults + applyRequestsOfSettings
	DestroyRequests = destroyRequestsOfDefaults + destroyRequestsOfSettings
)

var _ family.APIBudgets = (*Family)(nil)

// APIDemands implements family.APIBudgets: a run takes its estimate from its project's
// hourly budget. A project is known by its token (and endpoint), so runs of every class
// with the same token share one budget; its name shows a hash of them, never the token.
func (*Family) APIDemands(req tfrunner.Request) []executor.APIDemand {
	requests := ApplyRequests
	if req.Operation == tfrunner.Destroy {
		requests = DestroyRequests
	}
	return []executor.APIDemand{{
		Budget:   projectName(req.Env),
		Limit:    ProjectRequestsPerHour,
		Per:      time.Hour,
		Requests: requests,
	}}
}

// projectName names the Hetzner Cloud project that env's token (and endpoint) reaches with a
// hash of them, never the token.
func projectName(env map[string]string) string {
	sum := sha256.Sum256([]byte(env[EnvEndpoint] + "\x00" + env[EnvToken]))
	return "the Hetzner Cloud project of token " + hex.EncodeToString(sum[:4])
}
