// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"fmt"
	"regexp"
	"strings"
)

// Label rules of the API (docs.hetzner.cloud "Labels"): a key is an optional DNS subdomain
// prefix and "/" and a name of at most 63 characters; a value has at most 63 characters;
// names and values begin and end with an alphanumeric character and may hold "-", "_" and
// "." between. The hetzner.cloud/ prefix is reserved.
var (
	labelName      = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9._-]*[a-zA-Z0-9])?$`)
	dnsSubdomain   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	reservedPrefix = "hetzner.cloud"
)

// validateLabels reports the first label that breaks the API's rules.
func validateLabels(labels map[string]string) error {
	for k, v := range labels {
		if err := validateLabelKey(k); err != nil {
			return err
		}
		if len(v) > 63 || v != "" && !labelName.MatchString(v) {
			return fmt.Errorf("label value %q of key %q is invalid", v, k)
		}
	}
	return nil
}

func validateLabelKey(k string) error {
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if len(prefix) > 253 || !dnsSubdomain.MatchString(prefix) {
			return fmt.Errorf("label key %q has an invalid prefix", k)
		}
		if prefix == reservedPrefix {
			return fmt.Errorf("label key %q uses the reserved prefix %s/", k, reservedPrefix)
		}
		name = rest
	}
	if len(name) > 63 || !labelName.MatchString(name) {
		return fmt.Errorf("label key %q is invalid", k)
	}
	return nil
}

// selector is a parsed label selector: every requirement must hold.
type selector []requirement

type requirement struct {
	key    string
	op     string // "=", "!=", "exists", "!exists", "in", "notin"
	values []string
}

// parseSelector parses the API's label selector language: k==v, k=v, k!=v, k, !k,
// k in (v1,v2), k notin (v1,v2), joined by commas.
func parseSelector(s string) (selector, error) {
	var out selector
	for _, part := range splitTopLevel(s) {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("empty requirement in %q", s)
		}
		r, err := parseRequirement(part)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// splitTopLevel splits on commas outside parentheses.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

func parseRequirement(part string) (requirement, error) {
	if rest, ok := strings.CutPrefix(part, "!"); ok && !strings.ContainsAny(rest, "=!()") {
		return requirement{key: strings.TrimSpace(rest), op: "!exists"}, checkKey(strings.TrimSpace(rest))
	}
	for _, op := range []string{"!=", "==", "="} {
		if k, v, ok := strings.Cut(part, op); ok {
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			r := requirement{key: k, op: "=", values: []string{v}}
			if op == "!=" {
				r.op = "!="
			}
			return r, checkKey(k)
		}
	}
	fields := strings.Fields(part)
	if len(fields) == 1 {
		return requirement{key: fields[0], op: "exists"}, checkKey(fields[0])
	}
	if len(fields) >= 2 && (fields[1] == "in" || fields[1] == "notin") {
		list := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(part[len(fields[0]):]), fields[1]))
		if !strings.HasPrefix(list, "(") || !strings.HasSuffix(list, ")") {
			return requirement{}, fmt.Errorf("%q: values must be in parentheses", part)
		}
		var values []string
		for _, v := range strings.Split(list[1:len(list)-1], ",") {
			values = append(values, strings.TrimSpace(v))
		}
		return requirement{key: fields[0], op: fields[1], values: values}, checkKey(fields[0])
	}
	return requirement{}, fmt.Errorf("cannot parse %q", part)
}

func checkKey(k string) error {
	if err := validateLabelKey(k); err != nil {
		return err
	}
	return nil
}

func (s selector) matches(labels map[string]string) bool {
	for _, r := range s {
		v, has := labels[r.key]
		switch r.op {
		case "exists":
			if !has {
				return false
			}
		case "!exists":
			if has {
				return false
			}
		case "=":
			if !has || v != r.values[0] {
				return false
			}
		case "!=":
			if has && v == r.values[0] {
				return false
			}
		case "in":
			if !has || !contains(r.values, v) {
				return false
			}
		case "notin":
			if has && contains(r.values, v) {
				return false
			}
		}
	}
	return true
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
