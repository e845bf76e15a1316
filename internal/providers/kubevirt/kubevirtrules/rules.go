// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirtrules

import (
	"strings"

	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// apiRules recognise the infra API server's answers as the kubectl provider prints them:
// "<namespace>/<name> failed to run apply: error when retrieving current configuration of:
// Resource: ... from server for: "<file>": <the API server's status message>". The status
// message (k8s.io/apimachinery's StatusError texts) says what broke, and it comes last, so
// the rules bring it forward. Tried in this order: a quota is "forbidden"
// as well.
var apiRules = []struct {
	class tfrunner.ErrorClass
	// phrase identifies the answer (lower case, as a whole phrase); the answer starts after
	// the provider's last ": " before it (with its "<resource> \"<name>\"" when it has one).
	phrase string
}{
	// A ResourceQuota of the VM namespace: `virtualmachines.kubevirt.io "x" is forbidden:
	// exceeded quota: ...`.
	{class: tfrunner.Quota, phrase: "is forbidden: exceeded quota"},
	// RBAC: `secrets "x" is forbidden: User "system:serviceaccount:ns:sa" cannot get
	// resource "secrets" in API group "" in the namespace "ns"`.
	{class: tfrunner.Credentials, phrase: "is forbidden: user"},
	// A token the infra API server does not accept.
	{class: tfrunner.Credentials, phrase: "unauthorized"},
	// KubeVirt's validating webhooks refuse the VM's spec.
	{class: tfrunner.InvalidModule, phrase: "denied the request"},
	// KubeVirt is not installed on the infra cluster (no VirtualMachine kind).
	{class: tfrunner.InvalidModule, phrase: `no matches for kind "virtualmachine"`},
	{class: tfrunner.InvalidModule, phrase: "the server could not find the requested resource"},
}

// Rules are the KubeVirt family's error rules (tfrunner.Rules and tfrunner.Explainer): the
// infra API server's answers, with the answer itself as the run's message.
type Rules struct{}

var (
	_ tfrunner.Rules     = Rules{}
	_ tfrunner.Explainer = Rules{}
)

// Classify classifies one error diagnostic of a run of modules/kubevirt.
func (Rules) Classify(d tfrunner.Diagnostic) (tfrunner.ErrorClass, bool) {
	text := d.CodeText()
	for _, rule := range apiRules {
		if tfrunner.ContainsAnyWord(text, []string{rule.phrase}) {
			return rule.class, true
		}
	}
	return "", false
}

// Explain is the API server's answer, followed by what the provider was doing in
// parentheses ("<namespace>/<name> failed to run apply"): the one line shows who may not do
// what, where.
func (Rules) Explain(d tfrunner.Diagnostic) string {
	text := strings.Join(strings.Fields(d.CodeText()), " ")
	lower := strings.ToLower(text)
	for _, rule := range apiRules {
		i := strings.Index(lower, rule.phrase)
		if i < 0 {
			continue
		}
		start := 0
		if j := strings.LastIndex(text[:i], ": "); j >= 0 {
			start = j + 2
		}
		answer := text[start:]
		if context, _, ok := strings.Cut(text, ": "); ok && start > 0 && context != answer {
			return answer + " (" + context + ")"
		}
		return answer
	}
	return ""
}
