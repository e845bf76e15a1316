// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
)

// TestCheckCredentials: the family reads one page of this cluster's servers with the class's
// token; a missing, malformed, refused or read-less token is InvalidCredentials with a
// message that says which and holds no token; an API that does not answer or is out of
// requests is a check that could not be made.
func TestCheckCredentials(t *testing.T) {
	closed := func() string { // an endpoint nothing listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		return "http://" + addr + "/v1"
	}()
	for _, tc := range []struct {
		name string
		// env changes the class's credentials (a value "" deletes the key); fault breaks the
		// stand-in.
		env   map[string]string
		fault func(*standin.StandIn)
		// reason "" and message "": the check passes; reason "" with a message: it could not
		// be made.
		reason, message string
	}{
		{name: "valid token"},
		{name: "revoked token", fault: (*standin.StandIn).RevokeToken,
			reason: v1alpha1.ReasonInvalidCredentials, message: "the Hetzner Cloud API refused the class's HCLOUD_TOKEN: unable to authenticate (unauthorized, HTTP 401)"},
		{name: "token that may not read", fault: func(s *standin.StandIn) {
			s.Fail(standin.Failure{Method: "GET", PathPrefix: "/servers", Code: standin.CodeForbidden})
		}, reason: v1alpha1.ReasonInvalidCredentials, message: "the class's HCLOUD_TOKEN may not read servers: forbidden (forbidden, HTTP 403)"},
		{name: "no token", env: map[string]string{EnvToken: ""},
			reason: v1alpha1.ReasonInvalidCredentials, message: "no HCLOUD_TOKEN (the Hetzner Cloud API token) in the class's credentials (none)"},
		{name: "token with a trailing newline", env: map[string]string{EnvToken: standin.DefaultToken + "\n"},
			reason: v1alpha1.ReasonInvalidCredentials, message: "the class's HCLOUD_TOKEN has white space around it (a trailing newline?)"},
		{name: "short token", env: map[string]string{EnvToken: standin.DefaultToken[:32]},
			reason: v1alpha1.ReasonInvalidCredentials, message: "the class's HCLOUD_TOKEN has 32 characters; a Hetzner Cloud API token has 64"},
		{name: "rate limited", fault: func(s *standin.StandIn) { s.SetRateLimit(3600, time.Hour, 0) },
			message: "limit of 3600 requests per hour reached (rate_limit_exceeded"},
		{name: "API down", fault: func(s *standin.StandIn) {
			s.Fail(standin.Failure{Times: 5, Status: 502})
		}, message: "listing servers at"},
		{name: "API unreachable", env: map[string]string{EnvEndpoint: closed}, message: "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := standin.StartT(t, standin.Options{})
			if tc.fault != nil {
				tc.fault(s)
			}
			env := map[string]string{EnvToken: s.Token(), EnvEndpoint: s.Endpoint(), "OTHER": "x"}
			for k, v := range tc.env {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			err := NewFamily().CheckCredentials(context.Background(), family.Scope{Class: &v1alpha1.TofuNodeClass{}, Env: env, Cluster: "prod-eu"})
			var fe *family.Error
			switch {
			case tc.message == "":
				if err != nil {
					t.Fatalf("CheckCredentials() = %v, want nil", err)
				}
			case tc.reason != "":
				if !errors.As(err, &fe) || fe.Reason != tc.reason || !strings.HasPrefix(fe.Message, tc.message) {
					t.Fatalf("CheckCredentials() = %#v, want %s %q", err, tc.reason, tc.message)
				}
			default:
				if err == nil || errors.As(err, &fe) || !strings.Contains(err.Error(), tc.message) {
					t.Fatalf("CheckCredentials() = %v, want a check that could not be made with %q", err, tc.message)
				}
			}
			if err != nil && strings.Contains(err.Error(), standin.DefaultToken[:16]) {
				t.Errorf("the error holds the token: %v", err)
			}
			// At most one cheap read: the first page of one of this cluster's servers.
			var reads []string
			for _, r := range s.Requests() {
				reads = append(reads, r.Method+" "+r.Path)
				if r.Agent != hcloudrules.AgentController {
					t.Errorf("%s came from User-Agent %q, want the controller's %q", r, r.Agent, hcloudrules.AgentController)
				}
			}
			want := 1
			if tc.reason != "" && tc.fault == nil || tc.env[EnvEndpoint] != "" {
				want = 0 // refused before any request
			}
			if len(reads) != want || (want == 1 && reads[0] != "GET /servers?label_selector=fulfiller.sh%2Fcluster%3Dprod-eu&per_page=1") {
				t.Errorf("requests = %q, want %d read of one server of the cluster", reads, want)
			}
		})
	}
}
