// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloudrules

import "github.com/fulfiller-sh/fulfiller/internal/tfrunner"

// codeRules map the error codes of the Hetzner Cloud API (docs.hetzner.cloud "Errors"), as
// terraform-provider-hcloud and the hcloud CLI print them — "message (code, correlation id)"
// and "code: message" — and the words around them, to failure classes. The classes are tried
// in this order; a code matches as a whole word (tfrunner.ContainsAnyWord), so
// rate_limit_exceeded is not limit_exceeded.
var codeRules = []struct {
	class tfrunner.ErrorClass
	codes []string
}{
	{tfrunner.Credentials, []string{"unauthorized", "forbidden", "401", "403", "token_readonly", "invalid token", "token is invalid"}},
	{tfrunner.Quota, []string{"limit_exceeded", "server_limit_exceeded", "resource_limit_exceeded"}},
	{tfrunner.Capacity, []string{"resource_unavailable", "placement_error"}},
	{tfrunner.InvalidModule, []string{"invalid_input", "json_error", "uniqueness_error"}},
	{tfrunner.Transient, []string{"rate_limit_exceeded", "conflict", "locked", "server_error", "service_error",
		"maintenance", "timeout"}},
}

// phraseRules recognise errors the provider makes itself, by all of their words. It looks up
// names before it creates a server and reports what it did not find
// (terraform-provider-hcloud internal/server/resource.go).
var phraseRules = []struct {
	class tfrunner.ErrorClass
	words []string
}{
	{tfrunner.InvalidModule, []string{"server type", "not found"}},
	{tfrunner.InvalidModule, []string{"image", "for architecture", "not found"}},
	{tfrunner.InvalidModule, []string{"ssh key not found"}},
	{tfrunner.InvalidModule, []string{"placement group not found"}},
}

// Rules are the Hetzner Cloud family's error rules (tfrunner.Rules): the API's codes first,
// then the provider's own phrases.
type Rules struct{}

var _ tfrunner.Rules = Rules{}

// Classify classifies one error diagnostic of a run of modules/hetzner-cloud (or of any
// module whose cloud speaks the Hetzner Cloud API's codes).
func (Rules) Classify(d tfrunner.Diagnostic) (tfrunner.ErrorClass, bool) {
	text := d.CodeText()
	for _, rule := range codeRules {
		if tfrunner.ContainsAnyWord(text, rule.codes) {
			return rule.class, true
		}
	}
	for _, rule := range phraseRules {
		if tfrunner.ContainsAllWords(text, rule.words) {
			return rule.class, true
		}
	}
	return "", false
}
