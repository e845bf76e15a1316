// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"slices"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/standin"
)

const (
	apiUser     = "#ws+fulfiller"
	apiPassword = "a webservice password"
)

func startAPI(t *testing.T, budgets map[string]robot.Budget) *standin.API {
	t.Helper()
	api, err := standin.StartAPI(standin.APIConfig{User: apiUser, Password: apiPassword, Budgets: budgets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Close() })
	return api
}

func addServer(t *testing.T, api *standin.API, cfg standin.ServerConfig) *standin.Server {
	t.Helper()
	if cfg.Images == nil {
		cfg.Images = []string{testImage}
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	s, err := standin.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	api.AddServer(s)
	return s
}

func newClient(t *testing.T, api *standin.API, mod func(*robot.ClientConfig)) *robot.Client {
	t.Helper()
	cfg := robot.ClientConfig{Endpoint: api.URL, User: apiUser, Password: apiPassword, RetryWaitMin: 10 * time.Millisecond, RetryWaitMax: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	c, err := robot.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newSSHKey(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const testImage = "/root/.oldroot/nfs/images/Ubuntu-2404-noble-amd64-base.tar.gz"

// TestClient calls every operation against the stand-in and checks each documented error.
func TestClient(t *testing.T) {
	t.Parallel()
	api := startAPI(t, nil)
	addServer(t, api, standin.ServerConfig{Number: 321, Name: "pool-a", Product: "AX52", DC: "FSN1-DC1"})
	addServer(t, api, standin.ServerConfig{Number: 322, Name: "legacy", Product: "EX44", DC: "NBG1-DC3", NoRescue: true, NoReset: true})
	c := newClient(t, api, nil)
	ctx := context.Background()

	servers, err := c.ListServers(ctx)
	if err != nil || len(servers) != 2 || servers[0].Number != 321 || servers[0].Product != "AX52" || servers[1].Name != "legacy" {
		t.Fatalf("ListServers = %+v, %v", servers, err)
	}
	srv, err := c.GetServer(ctx, 321)
	if err != nil || srv.IP != "127.0.0.1" || !srv.Rescue || !srv.Reset || srv.Status != "ready" {
		t.Errorf("GetServer(321) = %+v, %v", srv, err)
	}
	if _, err := c.GetServer(ctx, 999); !errors.Is(err, robot.ErrServerNotFound) || !robot.IsCode(err, robot.CodeServerNotFound) {
		t.Errorf("GetServer(999) = %v, want SERVER_NOT_FOUND", err)
	}

	wrong := newClient(t, api, func(cfg *robot.ClientConfig) { cfg.Password = "wrong" })
	if _, err := wrong.ListServers(ctx); !errors.Is(err, robot.ErrInvalidCredentials) {
		t.Errorf("wrong password: %v, want ErrInvalidCredentials", err)
	}

	// Keys: none, create, duplicate, get, list.
	if keys, err := c.ListKeys(ctx); err != nil || len(keys) != 0 {
		t.Errorf("ListKeys on an empty account = %v, %v", keys, err)
	}
	signer := newSSHKey(t)
	fp := robot.MD5Fingerprint(signer.PublicKey())
	key, err := c.CreateKey(ctx, "fulfiller", robot.FormatHostKey(signer.PublicKey()))
	if err != nil || key.Fingerprint != fp || key.Type != "ED25519" {
		t.Fatalf("CreateKey = %+v, %v (fingerprint %s)", key, err, fp)
	}
	if _, err := c.CreateKey(ctx, "again", robot.FormatHostKey(signer.PublicKey())); !robot.IsCode(err, robot.CodeKeyAlreadyExists) {
		t.Errorf("a duplicate key: %v", err)
	}
	if _, err := c.GetKey(ctx, "00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff"); !robot.IsCode(err, robot.CodeNotFound) {
		t.Errorf("an unknown key: %v", err)
	}
	if _, err := c.CreateKey(ctx, "broken", "ssh-ed25519 not-base64"); !robot.IsCode(err, robot.CodeInvalidInput) {
		t.Errorf("a malformed key: %v", err)
	}

	// Rescue: inactive lists the systems, active names one and its keys; one boot only.
	r, err := c.GetRescue(ctx, 321)
	if err != nil || r.Active || !slices.Equal(r.OS, []string{"linux", "vkvm"}) {
		t.Errorf("GetRescue = %+v, %v", r, err)
	}
	r, err = c.ActivateRescue(ctx, 321, "linux", []string{fp})
	if err != nil || !r.Active || !slices.Equal(r.OS, []string{"linux"}) || !slices.Equal(r.AuthorizedKeys(), []string{fp}) {
		t.Errorf("ActivateRescue = %+v, %v", r, err)
	}
	var apiErr *robot.APIError
	if _, err := c.ActivateRescue(ctx, 321, "linux", []string{"de:ad:be:ef"}); !errors.As(err, &apiErr) || apiErr.Code != robot.CodeInvalidInput || !slices.Equal(apiErr.Invalid, []string{"authorized_key"}) {
		t.Errorf("rescue with an unknown key: %v", err)
	}
	if r, err = c.DeactivateRescue(ctx, 321); err != nil || r.Active {
		t.Errorf("DeactivateRescue = %+v, %v", r, err)
	}
	if _, err := c.ActivateRescue(ctx, 322, "linux", nil); !robot.IsCode(err, robot.CodeBootNotAvailable) {
		t.Errorf("rescue of a server without: %v", err)
	}

	// Reset.
	opts, err := c.GetResetOptions(ctx, 321)
	if err != nil || !slices.Contains(opts.Types, "hw") {
		t.Errorf("GetResetOptions = %+v, %v", opts, err)
	}
	if err := c.Reset(ctx, 321, robot.ResetHardware); err != nil {
		t.Errorf("Reset: %v", err)
	}
	if err := c.Reset(ctx, 321, "kick"); !errors.As(err, &apiErr) || apiErr.Code != robot.CodeInvalidInput || !slices.Equal(apiErr.Invalid, []string{"type"}) {
		t.Errorf("an unknown reset type: %v", err)
	}
	if err := c.Reset(ctx, 322, robot.ResetHardware); !robot.IsCode(err, robot.CodeResetNotAvailable) {
		t.Errorf("reset of a server without: %v", err)
	}
	if err := c.Reset(ctx, 321, robot.ResetManual); !robot.IsCode(err, robot.CodeResetManualActive) {
		t.Errorf("a manual reset while one runs: %v", err)
	}
	if err := c.DeleteKey(ctx, fp); err != nil {
		t.Errorf("DeleteKey: %v", err)
	}
}

// The client keeps to an endpoint's budget: it waits for a slot within MaxWait, and past it
// says when the budget renews without sending anything.
func TestClientWaitsForItsBudget(t *testing.T) {
	t.Parallel()
	budgets := map[string]robot.Budget{robot.EndpointReset: {Requests: 2, Interval: 1500 * time.Millisecond}}
	api := startAPI(t, budgets)
	addServer(t, api, standin.ServerConfig{Number: 321})
	ctx := context.Background()

	c := newClient(t, api, func(cfg *robot.ClientConfig) { cfg.Budgets, cfg.MaxWait = budgets, 10*time.Second })
	start := time.Now()
	for range 3 {
		if err := c.Reset(ctx, 321, robot.ResetSoftware); err != nil {
			t.Fatal(err)
		}
	}
	if waited := time.Since(start); waited < 1400*time.Millisecond {
		t.Errorf("three resets on a budget of two per 1.5s took %s", waited)
	}
	if n := count(api.Calls(), robot.EndpointReset); n != 3 {
		t.Errorf("the webservice saw %d resets, want 3 (none refused)", n)
	}

	impatient := newClient(t, api, func(cfg *robot.ClientConfig) { cfg.Budgets, cfg.MaxWait = budgets, 100*time.Millisecond })
	before := time.Now()
	_ = impatient.Reset(ctx, 321, robot.ResetSoftware)
	_ = impatient.Reset(ctx, 321, robot.ResetSoftware)
	err := impatient.Reset(ctx, 321, robot.ResetSoftware)
	var rl *robot.RateLimitedError
	if !errors.As(err, &rl) || rl.API != nil || rl.Budget.Requests != 2 || rl.ResetAt.Before(before) || rl.ResetAt.After(time.Now().Add(1600*time.Millisecond)) {
		t.Fatalf("a third reset within MaxWait 100ms: %v", err)
	}
}

// Someone else using the account's budget: the webservice refuses (403
// RATE_LIMIT_EXCEEDED); the client retries once the budget has certainly renewed, within
// MaxWait, and otherwise reports the refusal and when to come back.
func TestClientRetriesAfterTheWebserviceRefuses(t *testing.T) {
	t.Parallel()
	api := startAPI(t, map[string]robot.Budget{robot.EndpointReset: {Requests: 1, Interval: time.Second}})
	addServer(t, api, standin.ServerConfig{Number: 321})
	ctx := context.Background()
	other := newClient(t, api, nil)
	if err := other.Reset(ctx, 321, robot.ResetSoftware); err != nil {
		t.Fatal(err)
	}
	patient := newClient(t, api, func(cfg *robot.ClientConfig) { cfg.MaxWait = 5 * time.Second })
	start := time.Now()
	if err := patient.Reset(ctx, 321, robot.ResetSoftware); err != nil {
		t.Fatalf("a refused reset retried within MaxWait: %v", err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("the retry came after %s, before the budget renewed", waited)
	}
	if n := count(api.Calls(), robot.EndpointReset); n != 3 {
		t.Errorf("the webservice saw %d resets, want 3 (one refused)", n)
	}

	impatient := newClient(t, api, func(cfg *robot.ClientConfig) { cfg.MaxWait = 100 * time.Millisecond })
	err := impatient.Reset(ctx, 321, robot.ResetSoftware)
	var rl *robot.RateLimitedError
	if !errors.As(err, &rl) || rl.API == nil || rl.API.Code != robot.CodeRateLimitExceeded || rl.Budget.Requests != 1 || rl.Budget.Interval != time.Second {
		t.Fatalf("a refused reset past MaxWait: %v", err)
	}
	if robot.Reason(err) != robotrules.ReasonRateLimited {
		t.Errorf("reason %s", robot.Reason(err))
	}
}

// The stand-in records the requests about each server, as a test asserts what was done to
// a server outside the pool: a read and a reset of 321 are 321's, the listing is nobody's,
// a read of a server the account does not have is still recorded under its number.
func TestStandInRecordsRequestsPerServer(t *testing.T) {
	t.Parallel()
	api := startAPI(t, nil)
	addServer(t, api, standin.ServerConfig{Number: 321})
	addServer(t, api, standin.ServerConfig{Number: 322})
	ctx := context.Background()
	c := newClient(t, api, nil)
	if _, err := c.ListServers(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetServer(ctx, 321); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(ctx, 321, robot.ResetSoftware); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetServer(ctx, 999); !robot.IsCode(err, robot.CodeServerNotFound) {
		t.Fatalf("reading a server the account does not have: %v", err)
	}
	if got, want := api.ServerCalls(321), []string{robot.EndpointServer, robot.EndpointReset}; !slices.Equal(got, want) {
		t.Errorf("server 321: %v, want %v", got, want)
	}
	if got := api.ServerCalls(322); len(got) != 0 {
		t.Errorf("server 322, never asked about: %v", got)
	}
	if got, want := api.ServerCalls(999), []string{robot.EndpointServer}; !slices.Equal(got, want) {
		t.Errorf("server 999: %v, want %v", got, want)
	}
}

func count(calls []string, endpoint string) int {
	n := 0
	for _, c := range calls {
		if c == endpoint {
			n++
		}
	}
	return n
}
