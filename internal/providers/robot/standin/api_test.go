// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/apitally"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/standin"
)

// TestCounts: the webservice's requests are counted per endpoint (the route, not the
// server's number), webservice user (a hash of the user and password), User-Agent and
// status, refused ones too.
func TestCounts(t *testing.T) {
	api, err := standin.StartAPI(standin.APIConfig{User: "#ws+counted", Password: "secret password",
		Budgets: map[string]robot.Budget{robot.EndpointResetOptions: {Requests: 1, Interval: 3600e9}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Close() })
	call := func(method, path, user, pass string) {
		t.Helper()
		req, err := http.NewRequest(method, api.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(user, pass)
		req.Header.Set("User-Agent", "counting")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, path := range []string{"/server/321", "/server/322", "/server"} {
		call(http.MethodGet, path, "#ws+counted", "secret password")
	}
	call(http.MethodGet, "/reset/321", "#ws+counted", "secret password")
	call(http.MethodGet, "/reset/322", "#ws+counted", "secret password") // over the budget
	call(http.MethodGet, "/server", "#ws+counted", "wrong password")
	call(http.MethodGet, "/nothing", "#ws+counted", "secret password")

	us, wrong := apitally.TokenID("#ws+counted:secret password"), apitally.TokenID("#ws+counted:wrong password")
	want := []apitally.Count{
		{Key: apitally.Key{Endpoint: "GET ?", Token: us, Agent: "counting", Status: http.StatusNotFound}, Requests: 1},
		// No server is in the account: Robot answers SERVER_NOT_FOUND, for the list too.
		{Key: apitally.Key{Endpoint: robot.EndpointResetOptions, Token: us, Agent: "counting", Status: http.StatusNotFound}, Requests: 1},
		{Key: apitally.Key{Endpoint: robot.EndpointResetOptions, Token: us, Agent: "counting", Status: http.StatusForbidden}, Requests: 1},
		{Key: apitally.Key{Endpoint: robot.EndpointServers, Token: us, Agent: "counting", Status: http.StatusNotFound}, Requests: 1},
		{Key: apitally.Key{Endpoint: robot.EndpointServers, Token: wrong, Agent: "counting", Status: http.StatusUnauthorized}, Requests: 1},
		{Key: apitally.Key{Endpoint: robot.EndpointServer, Token: us, Agent: "counting", Status: http.StatusNotFound}, Requests: 2},
	}
	got := api.Counts()
	if len(got) != len(want) {
		t.Fatalf("counts %+v;\nwant %+v", got, want)
	}
	index := map[apitally.Key]int{}
	for _, c := range got {
		index[c.Key] = c.Requests
		if strings.Contains(c.Token, "secret") || strings.Contains(c.Token, "ws+") {
			t.Errorf("count %+v holds the credentials", c)
		}
	}
	for _, w := range want {
		if index[w.Key] != w.Requests {
			t.Errorf("%+v: %d requests counted, want %d", w.Key, index[w.Key], w.Requests)
		}
	}
}
