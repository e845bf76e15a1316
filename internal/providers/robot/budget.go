// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"

	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// runEndpoints are the webservice requests one run of modules/hetzner-robot makes at most
// (`fulfiller robot activate` or `release`, Activator): it reads the server, and for a cold
// activation or a release arms the rescue system with the fulfiller's key (read, and create
// when missing) and resets the server into it. A warm activation makes only the read.
var runEndpoints = map[string]int{
	EndpointServer:    1,
	EndpointKey:       1,
	EndpointKeyCreate: 1,
	EndpointRescueOn:  1,
	EndpointReset:     1,
}

var _ family.APIBudgets = (*Family)(nil)

// APIDemands implements family.APIBudgets: a run takes its requests from the documented
// budget of each endpoint (DocumentedBudgets; the two server reads share one), per
// webservice user, so runs of every class with the same user share them. The tightest is the
// reset's: 50 per hour. A budget's name shows a hash of the user, not the user.
func (*Family) APIDemands(req tfrunner.Request) []executor.APIDemand {
	sum := sha256.Sum256([]byte(req.Env[EnvEndpoint] + "\x00" + req.Env[EnvUser]))
	user := hex.EncodeToString(sum[:4])
	budgets := DocumentedBudgets()
	out := make([]executor.APIDemand, 0, len(runEndpoints))
	for endpoint, n := range runEndpoints {
		counted := endpoint
		if shared, ok := sharedBudgets[endpoint]; ok {
			counted = shared
		}
		b := budgets[counted]
		out = append(out, executor.APIDemand{
			Budget:   "the Robot webservice's " + counted + " budget of user " + user,
			Limit:    b.Requests,
			Per:      b.Interval,
			Requests: n,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Budget < out[j].Budget })
	return out
}
