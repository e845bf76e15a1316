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

// What one run of modules/hetzner-cloud asks of the API. Measured against the stand-in
// (TestModule logs the calls): an apply made 10 requests with a 1 s create action (the server
// type, image and SSH key look-ups, the placement group, the create, the network attach, two
// action polls and a read), a destroy 3. The provider polls an action after 0.5, 1.5, 3.5,
// 7.5, 15.5, 31.5 and 63.5 s (poll_interval 500ms, exponential), so a real create of 20-60 s
// takes 6-7 polls instead of one.
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
	sum := sha256.Sum256([]byte(req.Env[EnvEndpoint] + "\x00" + req.Env[EnvToken]))
	return []executor.APIDemand{{
		Budget:   "the Hetzner Cloud project of token " + hex.EncodeToString(sum[:4]),
		Limit:    ProjectRequestsPerHour,
		Per:      time.Hour,
		Requests: requests,
	}}
}
