package hcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The family's reads of the Hetzner Cloud API are two cheap GETs, made with net/http: the
// official client (hcloud-go) links package testing, which the controller binary must not.

// DefaultEndpoint is the API's endpoint when HCLOUD_ENDPOINT is unset.
const DefaultEndpoint = "https://api.hetzner.cloud/v1"

// Error codes of the API (docs.hetzner.cloud "Errors") the family reads.
const (
	codeUnauthorized      = "unauthorized"
	codeForbidden         = "forbidden"
	codeRateLimitExceeded = "rate_limit_exceeded"
)

// apiTimeout bounds one request.
const apiTimeout = 15 * time.Second

// apiError is an error answer of the API: {"error": {"code", "message"}}.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Message + " (" + e.Code + ")" }

// isCode reports whether err is an error answer with code.
func isCode(err error, code string) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Code == code
}

// listServers reads the first page of one server matching selector (all servers when empty)
// with the environment's token at its endpoint. It returns the answer's headers, also with
// an error answer (the rate limit's headers come with every answer).
func listServers(ctx context.Context, env map[string]string, selector string) (http.Header, error) {
	query := url.Values{"per_page": {"1"}}
	if selector != "" {
		query.Set("label_selector", selector)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(endpoint(env), "/")+"/servers?"+query.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+env[EnvToken])
	req.Header.Set("User-Agent", "fulfiller")
	resp, err := (&http.Client{Timeout: apiTimeout}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.Header, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return resp.Header, nil
	}
	var envelope struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(body, &envelope) == nil && envelope.Error != nil && envelope.Error.Code != "" {
		return resp.Header, envelope.Error
	}
	return resp.Header, fmt.Errorf("unexpected answer %s", resp.Status)
}

func endpoint(env map[string]string) string {
	if e := env[EnvEndpoint]; e != "" {
		return e
	}
	return DefaultEndpoint
}
