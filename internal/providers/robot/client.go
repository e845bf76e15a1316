// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"k8s.io/utils/clock"
)

// DefaultEndpoint is the Robot webservice.
const DefaultEndpoint = "https://robot-ws.your-server.de"

// Environment variables of the `fulfiller robot` command and of ClientConfigFromEnv: a
// class's credentials Secret holds them, and the runner passes them to tofu.
const (
	EnvUser     = "HROBOT_USER"
	EnvPassword = "HROBOT_PASSWORD"
	// EnvEndpoint overrides DefaultEndpoint (a stand-in, a proxy).
	EnvEndpoint = "HROBOT_ENDPOINT"
)

// ClientConfig configures a Client. User and Password are the webservice user's.
type ClientConfig struct {
	Endpoint string
	User     string
	Password string
	// Budgets are the endpoints' request budgets; default DocumentedBudgets.
	Budgets map[string]Budget
	// MaxWait is how long a request waits for its endpoint's budget before failing with a
	// *RateLimitedError (default 1 minute).
	MaxWait time.Duration
	// RetryMax is how often a request is retried after a transient failure (connection
	// errors, 5xx answers); default 4. RetryWaitMin/Max bound the back-off (default 1s, 30s).
	RetryMax     int
	RetryWaitMin time.Duration
	RetryWaitMax time.Duration
	// HTTPClient sends the requests (default: a pooled client with a 30s timeout).
	HTTPClient *http.Client
	// Clock (default the real one) times the budgets.
	Clock clock.Clock
	// UserAgent is sent with every request.
	UserAgent string
}

// ClientConfigFromEnv reads the credentials and endpoint from the environment.
func ClientConfigFromEnv(getenv func(string) string) (ClientConfig, error) {
	cfg := ClientConfig{Endpoint: getenv(EnvEndpoint), User: getenv(EnvUser), Password: getenv(EnvPassword)}
	var missing []string
	if cfg.User == "" {
		missing = append(missing, EnvUser)
	}
	if cfg.Password == "" {
		missing = append(missing, EnvPassword)
	}
	if len(missing) > 0 {
		return cfg, fmt.Errorf("%w: %s not set", ErrInvalidCredentials, strings.Join(missing, " and "))
	}
	return cfg, nil
}

// Client calls the Robot webservice. It is safe for concurrent use; its request budgets are
// those of this process, so several processes sharing an account can still be refused, which
// the client reports as a *RateLimitedError with the webservice's answer.
type Client struct {
	base    *url.URL
	user    string
	pass    string
	agent   string
	http    *http.Client
	limiter *limiter
	clock   clock.Clock

	retryMax                    int
	retryWaitMin, retryWaitMaxD time.Duration
}

// NewClient checks cfg and returns a client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	base, err := url.Parse(strings.TrimSuffix(cfg.Endpoint, "/"))
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, fmt.Errorf("invalid Robot webservice endpoint %q", cfg.Endpoint)
	}
	if cfg.User == "" || cfg.Password == "" {
		return nil, fmt.Errorf("%w: user or password is empty", ErrInvalidCredentials)
	}
	if cfg.Budgets == nil {
		cfg.Budgets = DocumentedBudgets()
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = time.Minute
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 4
	}
	if cfg.RetryWaitMin <= 0 {
		cfg.RetryWaitMin = time.Second
	}
	if cfg.RetryWaitMax <= 0 {
		cfg.RetryWaitMax = 30 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "fulfiller-robot"
	}
	return &Client{
		base: base, user: cfg.User, pass: cfg.Password, agent: cfg.UserAgent, http: cfg.HTTPClient,
		limiter: newLimiter(cfg.Clock, cfg.Budgets, cfg.MaxWait), clock: cfg.Clock,
		retryMax: cfg.RetryMax, retryWaitMin: cfg.RetryWaitMin, retryWaitMaxD: cfg.RetryWaitMax,
	}, nil
}

// do sends one request of endpoint to path (form-encoded when form is not nil) and decodes a
// successful answer into out. Each attempt, retries included, takes a request from the
// endpoint's budget first. Transient failures (connection errors, 5xx) are retried with
// go-retryablehttp's back-off; a RATE_LIMIT_EXCEEDED answer is retried once the budget has
// certainly renewed, if that is within MaxWait.
func (c *Client) do(ctx context.Context, endpoint, method, path string, form url.Values, out any) error {
	if err := c.limiter.wait(ctx, endpoint); err != nil {
		return err
	}
	var body []byte
	if form != nil {
		body = []byte(form.Encode())
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return fmt.Errorf("building %s: %w", endpoint, err)
	}
	req.SetBasicAuth(c.user, c.pass)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.agent)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}

	var last *APIError // the latest error envelope, read by CheckRetry
	var limited *RateLimitedError
	rc := &retryablehttp.Client{
		HTTPClient:   c.http,
		RetryMax:     c.retryMax,
		RetryWaitMin: c.retryWaitMin,
		RetryWaitMax: c.retryWaitMaxD,
		Logger:       nil,
		CheckRetry: func(ctx context.Context, resp *http.Response, err error) (bool, error) {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			last, limited = nil, nil
			if err != nil || resp.StatusCode < 400 {
				return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
			}
			data, readErr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(data))
			if readErr != nil {
				return true, nil
			}
			last = parseAPIError(resp.StatusCode, data)
			if last.Code == CodeRateLimitExceeded {
				limited = c.limiter.refused(endpoint, last)
				return true, nil
			}
			return retryablehttp.DefaultRetryPolicy(ctx, resp, nil)
		},
		Backoff: func(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
			if limited != nil {
				return 0 // PrepareRetry waits for the budget, or gives up
			}
			return retryablehttp.DefaultBackoff(min, max, attempt, resp)
		},
		PrepareRetry: func(*http.Request) error {
			return c.limiter.wait(ctx, endpoint)
		},
		ErrorHandler: func(resp *http.Response, err error, _ int) (*http.Response, error) {
			return resp, err
		},
	}
	resp, err := rc.Do(req)
	if resp != nil {
		defer resp.Body.Close()
	}
	var waitErr *RateLimitedError
	switch {
	case errors.As(err, &waitErr) && limited != nil:
		// The webservice refused and its budget renews later than MaxWait.
		if waitErr.ResetAt.After(limited.ResetAt) {
			limited.ResetAt = waitErr.ResetAt
		}
		return limited
	case errors.As(err, &waitErr):
		return waitErr
	case ctx.Err() != nil:
		return ctx.Err()
	case resp == nil:
		return fmt.Errorf("%s: %w", endpoint, err)
	case resp.StatusCode >= 400:
		if last == nil {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			last = parseAPIError(resp.StatusCode, data)
		}
		if limited != nil {
			return limited
		}
		return fmt.Errorf("%s: %w", endpoint, last)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", endpoint, err)
	}
	return nil
}

// parseAPIError reads the error envelope; an answer without one (a proxy's page) becomes an
// envelope with the HTTP status and no code.
func parseAPIError(status int, data []byte) *APIError {
	var env struct {
		Error *APIError `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err == nil && env.Error != nil && env.Error.Code != "" {
		if env.Error.Status == 0 {
			env.Error.Status = status
		}
		return env.Error
	}
	msg := strings.Join(strings.Fields(string(data)), " ")
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	e := &APIError{Status: status, Message: msg}
	if status == http.StatusUnauthorized {
		e.Code = CodeUnauthorized
	}
	return e
}

func serverPath(prefix string, number int, suffix string) string {
	return prefix + strconv.Itoa(number) + suffix
}
