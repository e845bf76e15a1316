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

// What one run of modules/hetzner-cloud asks of the API: the server type, image and SSH key
// look-ups, the placement group, the create, the network attach, the action polls and a read
// (TestModule logs the calls against the stand-in). The provider polls an action with an
// exponential interval, so a real create of 20-60 s takes several polls where the stand-in's
// takes one; these estimates leave room for them (the counts measured are in
// docs/benchmarks.md, "Hetzner Cloud API requests per run").
const (
	ApplyRequests   = 20
	DestroyRequests = 5
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
