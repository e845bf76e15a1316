// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		writeError(w, newError(CodeServerError, "encoding the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, e *apiError) {
	if rec, ok := w.(*recorder); ok {
		rec.code = e.code
	}
	writeJSON(w, e.status, map[string]any{"error": jsonError{Code: e.code, Message: e.message, Details: e.details}})
}

// decode reads a JSON request body into v: json_error when it is not JSON of that shape.
func decode(r *http.Request, v any) *apiError {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return newError(CodeJSONError, "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return newError(CodeJSONError, "invalid JSON in request body: %v", err)
	}
	return nil
}

// idOrName reads a JSON value that is an ID (number) or a name (string).
func idOrName(raw json.RawMessage) (string, bool) {
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", false
	}
	switch x := v.(type) {
	case json.Number:
		n = x
		return n.String(), true
	case string:
		return x, x != ""
	}
	return "", false
}

func pathID(r *http.Request) (int64, *apiError) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, invalidInput("id", "must be a positive integer")
	}
	return id, nil
}

// Pagination (docs.hetzner.cloud "Pagination"): page from 1, per_page 25 by default and 50
// at most.
const (
	defaultPerPage = 25
	maxPerPage     = 50
)

// paginate cuts out the requested page of items, sets the Link header and returns the meta.
func paginate[T any](w http.ResponseWriter, r *http.Request, items []T) ([]T, *jsonMeta, *apiError) {
	q := r.URL.Query()
	page, perPage := 1, defaultPerPage
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, nil, invalidInput("page", "must be a positive integer")
		}
		page = n
	}
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, nil, invalidInput("per_page", "must be a positive integer")
		}
		perPage = min(n, maxPerPage)
	}
	total := len(items)
	last := max(1, int(math.Ceil(float64(total)/float64(perPage))))
	from, to := min((page-1)*perPage, total), min(page*perPage, total)
	meta := &jsonMeta{Pagination: jsonPagination{Page: page, PerPage: perPage, LastPage: &last, TotalEntries: &total}}
	var links []string
	link := func(p int, rel string) string {
		u := *r.URL
		v := u.Query()
		v.Set("page", strconv.Itoa(p))
		v.Set("per_page", strconv.Itoa(perPage))
		u.RawQuery = v.Encode()
		return fmt.Sprintf("<%s>; rel=%q", u.RequestURI(), rel)
	}
	if page > 1 {
		prev := min(page-1, last)
		meta.Pagination.PreviousPage = &prev
		links = append(links, link(prev, "prev"))
	}
	if page < last {
		next := page + 1
		meta.Pagination.NextPage = &next
		links = append(links, link(next, "next"))
	}
	links = append(links, link(last, "last"))
	w.Header().Set("Link", strings.Join(links, ", "))
	return items[from:to], meta, nil
}

// sortItems sorts by the `sort` query parameters (field or field:asc|desc, several allowed),
// then by ID. keys are the sortable fields.
func sortItems[T any](r *http.Request, items []T, id func(T) int64, keys map[string]func(a, b T) int) *apiError {
	type order struct {
		cmp  func(a, b T) int
		desc bool
	}
	var orders []order
	for _, s := range r.URL.Query()["sort"] {
		field, dir, _ := strings.Cut(s, ":")
		cmp, ok := keys[field]
		if field == "id" {
			cmp, ok = func(a, b T) int { return compare(id(a), id(b)) }, true
		}
		if !ok || dir != "" && dir != "asc" && dir != "desc" {
			return invalidInput("sort", fmt.Sprintf("%q is not a valid sort order", s))
		}
		orders = append(orders, order{cmp: cmp, desc: dir == "desc"})
	}
	sort.SliceStable(items, func(i, j int) bool {
		for _, o := range orders {
			c := o.cmp(items[i], items[j])
			if o.desc {
				c = -c
			}
			if c != 0 {
				return c < 0
			}
		}
		return id(items[i]) < id(items[j])
	})
	return nil
}

func compare[T int64 | string | int](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareTime(a, b time.Time) int { return a.Compare(b) }

// labelFilter reads the label_selector parameter.
func labelFilter(q url.Values) (selector, *apiError) {
	v := q.Get("label_selector")
	if v == "" {
		return nil, nil
	}
	sel, err := parseSelector(v)
	if err != nil {
		return nil, invalidInput("label_selector", err.Error())
	}
	return sel, nil
}
