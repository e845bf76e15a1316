// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// TestAPIDemands: a run takes one request from each endpoint budget it may use, per
// webservice user; the two server reads count against one budget; the user never shows.
func TestAPIDemands(t *testing.T) {
	req := tfrunner.Request{Family: v1alpha1.FamilyRobot, Operation: tfrunner.Apply, Env: map[string]string{EnvUser: "#ws+robotuser"}}
	demands := NewFamily().APIDemands(req)
	byEndpoint := map[string]executor.APIDemand{}
	for _, d := range demands {
		if strings.Contains(d.Budget, "robotuser") || d.Requests != 1 || d.Per != time.Hour {
			t.Errorf("demand %+v", d)
		}
		for _, e := range []string{EndpointServers, EndpointKey, EndpointKeyCreate, EndpointRescueOn, EndpointReset} {
			if strings.Contains(d.Budget, "'s "+e+" budget") {
				byEndpoint[e] = d
			}
		}
	}
	if len(byEndpoint) != 5 || len(demands) != 5 {
		t.Fatalf("demands %+v", demands)
	}
	if byEndpoint[EndpointReset].Limit != 50 || byEndpoint[EndpointServers].Limit != 200 {
		t.Errorf("reset %+v, server %+v", byEndpoint[EndpointReset], byEndpoint[EndpointServers])
	}
	req.Env[EnvUser] = "#ws+other"
	if other := NewFamily().APIDemands(req); other[0].Budget == demands[0].Budget {
		t.Errorf("two users share %q", other[0].Budget)
	}
}
