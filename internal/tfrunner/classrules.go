// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ErrorRule is a class's own rule for a generic module (one without a family): an error
// diagnostic with the code, as a whole word, or matching the pattern, fails the run with
// the class.
type ErrorRule struct {
	Code    string     `json:"code,omitempty"`
	Pattern string     `json:"pattern,omitempty"`
	Class   ErrorClass `json:"class"`
}

// ruleClasses are the classes a class's rule may give.
var ruleClasses = []ErrorClass{Capacity, Quota, Credentials, Transient, InvalidModule}

// CompileErrorRules checks a class's rules and makes Rules of them: each needs exactly one of
// a code and a pattern (an RE2 regular expression), and a class a failure of a node type can
// have. The rules are tried in order, the first match wins; nil for none.
func CompileErrorRules(rules []ErrorRule) (Rules, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	out := make(classRules, 0, len(rules))
	for i, r := range rules {
		if (r.Code == "") == (r.Pattern == "") {
			return nil, fmt.Errorf("error rule %d: set exactly one of code and pattern", i)
		}
		if !slices.Contains(ruleClasses, r.Class) {
			return nil, fmt.Errorf("error rule %d: class %q is not one of %s", i, r.Class, ruleClassNames)
		}
		cr := compiledRule{rule: r}
		if r.Pattern != "" {
			re, err := regexp.Compile(r.Pattern)
			if err != nil {
				return nil, fmt.Errorf("error rule %d: pattern %q: %w", i, r.Pattern, err)
			}
			cr.re = re
		}
		out = append(out, cr)
	}
	return out, nil
}

// ruleClassNames lists ruleClasses for an error message.
var ruleClassNames = func() string {
	names := make([]string, len(ruleClasses))
	for i, c := range ruleClasses {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}()

type compiledRule struct {
	rule ErrorRule
	re   *regexp.Regexp
}

type classRules []compiledRule

func (rs classRules) Classify(d Diagnostic) (ErrorClass, bool) {
	text := d.CodeText()
	for _, r := range rs {
		if r.re != nil && (r.re.MatchString(text) || r.re.MatchString(d.Summary+"\n"+d.Detail)) ||
			r.rule.Code != "" && ContainsAnyWord(text, []string{r.rule.Code}) {
			return r.rule.Class, true
		}
	}
	return "", false
}
