// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
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

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/hcloudrules"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// The family reads the Hetzner Cloud API with its own small client over hcloud-go's schema
// types (hcloud-go/v2/hcloud/schema): the hcloud package itself links the standard library's
// testing package (v2.52.0 hcloud/testing.go), which the controller binary must not carry.

// The environment a class's credentials give its runs, the token and the API's address
// (hcloudrules.Endpoint): the runner's error rules, which link no Kubernetes client, define
// them.
const (
	EnvToken    = hcloudrules.EnvToken
	EnvEndpoint = hcloudrules.EnvEndpoint
)

// apiTimeout bounds one family call to the API; perPage is the most items a page holds.
const (
	apiTimeout = 30 * time.Second
	perPage    = 50
)

// api is a client of the Hetzner Cloud API with one class's token.
type api struct {
	endpoint, token string
	http            *http.Client
	// spend and project count each request in the project's budget (family.Scope.Spend).
	spend   func(executor.APIDemand)
	project string
}

// newAPI returns a client with the class's token and endpoint.
func newAPI(s family.Scope) (*api, error) {
	token := s.Env[EnvToken]
	if token == "" {
		return nil, family.Errorf(v1alpha1.ReasonInvalidCredentials, "the class's credentials have no %s", EnvToken)
	}
	return &api{endpoint: hcloudrules.Endpoint(s.Env), token: token, http: &http.Client{Timeout: apiTimeout},
		spend: s.Spend, project: projectName(s.Env)}, nil
}

// apiError is an error answer of the API: its code (unauthorized, forbidden,
// rate_limit_exceeded, ...) and message.
type apiError struct {
	status        int
	code, message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (%s, HTTP %d)", e.message, e.code, e.status)
}

// Error codes of the API (docs.hetzner.cloud "Errors") the family reads.
const (
	codeUnauthorized = "unauthorized"
	codeForbidden    = "forbidden"
	codeNotFound     = "not_found"
)

// isCode reports whether err is an error answer with code.
func isCode(err error, code string) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.code == code
}

// call makes one request and returns the answer's body; an error answer is an *apiError.
func (a *api) call(ctx context.Context, method, path string, query url.Values) ([]byte, error) {
	body, _, err := a.do(ctx, method, path, query)
	return body, err
}

// do makes one request and returns the answer's body and headers, the headers also with an
// error answer (the rate limit's headers come with every answer); an error answer is an
// *apiError.
func (a *api) do(ctx context.Context, method, path string, query url.Values) ([]byte, http.Header, error) {
	target := a.endpoint + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := hcloudrules.NewRequest(ctx, method, target, a.token, hcloudrules.AgentController)
	if err != nil {
		return nil, nil, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if a.spend != nil {
		// Answered, so counted by the API (a rate-limit refusal too).
		a.spend(executor.APIDemand{Budget: a.project, Limit: ProjectRequestsPerHour, Per: time.Hour, Requests: 1})
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, resp.Header, fmt.Errorf("reading %s: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e schema.ErrorResponse
		if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
			return nil, resp.Header, &apiError{status: resp.StatusCode, code: "http_error", message: strings.TrimSpace(string(body))}
		}
		return nil, resp.Header, &apiError{status: resp.StatusCode, code: e.Error.Code, message: e.Error.Message}
	}
	return body, resp.Header, nil
}

// get reads one page of a list into out (a *schema.XListResponse embedding the meta) and
// returns the next page, 0 after the last.
func (a *api) get(ctx context.Context, path string, query url.Values, page int, out any) (int, error) {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("page", strconv.Itoa(page))
	q.Set("per_page", strconv.Itoa(perPage))
	body, err := a.call(ctx, http.MethodGet, path, q)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return 0, fmt.Errorf("decoding %s: %w", path, err)
	}
	var meta schema.MetaResponse
	if err := json.Unmarshal(body, &meta); err != nil {
		return 0, fmt.Errorf("decoding %s: %w", path, err)
	}
	if meta.Meta.Pagination == nil {
		return 0, nil
	}
	return meta.Meta.Pagination.NextPage, nil
}

// maxPages bounds a listing, against an API that never says it is done.
const maxPages = 100

// serverTypes reads every server type.
func (a *api) serverTypes(ctx context.Context) ([]schema.ServerType, error) {
	var out []schema.ServerType
	for page, n := 1, 0; page != 0; n++ {
		if n == maxPages {
			return nil, fmt.Errorf("listing server types: more than %d pages", maxPages)
		}
		var resp schema.ServerTypeListResponse
		next, err := a.get(ctx, "/server_types", nil, page, &resp)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.ServerTypes...)
		page = next
	}
	return out, nil
}

// servers reads every server with labels matching selector.
func (a *api) servers(ctx context.Context, selector string) ([]schema.Server, error) {
	var out []schema.Server
	for page, n := 1, 0; page != 0; n++ {
		if n == maxPages {
			return nil, fmt.Errorf("listing servers: more than %d pages", maxPages)
		}
		var resp schema.ServerListResponse
		next, err := a.get(ctx, "/servers", url.Values{"label_selector": {selector}}, page, &resp)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Servers...)
		page = next
	}
	return out, nil
}

// firstServer reads the first page of one server matching selector (any server when empty):
// the cheapest authenticated read. It returns the answer's headers, also with an error.
func (a *api) firstServer(ctx context.Context, selector string) (http.Header, error) {
	query := url.Values{"per_page": {"1"}}
	if selector != "" {
		query.Set("label_selector", selector)
	}
	_, header, err := a.do(ctx, http.MethodGet, "/servers", query)
	return header, err
}

// server reads one server; false when it is gone.
func (a *api) server(ctx context.Context, id int64) (schema.Server, bool, error) {
	body, err := a.call(ctx, http.MethodGet, "/servers/"+strconv.FormatInt(id, 10), nil)
	if isCode(err, codeNotFound) {
		return schema.Server{}, false, nil
	}
	if err != nil {
		return schema.Server{}, false, err
	}
	var resp schema.ServerGetResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return schema.Server{}, false, fmt.Errorf("decoding server %d: %w", id, err)
	}
	return resp.Server, true, nil
}

// deleteServer deletes a server (the API answers with the delete action, which runs on).
func (a *api) deleteServer(ctx context.Context, id int64) error {
	_, err := a.call(ctx, http.MethodDelete, "/servers/"+strconv.FormatInt(id, 10), nil)
	if isCode(err, codeNotFound) {
		return nil
	}
	return err
}

// familyError names what the API refused: a token that is wrong or may not read is
// InvalidCredentials; anything else is returned as it is (the call is made again later).
func familyError(what string, err error) error {
	if e, ok := errors.AsType[*apiError](err); ok && (e.code == "unauthorized" || e.code == "forbidden" || e.code == "token_readonly") {
		return family.Errorf(v1alpha1.ReasonInvalidCredentials, "the token may not %s: %s", what, e.Error())
	}
	return fmt.Errorf("%s: %w", what, err)
}
