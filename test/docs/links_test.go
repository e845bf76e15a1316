// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package docs checks the project's Markdown: every relative link resolves, to a file and,
// with a fragment, to a heading of it, and every repository path a document names in
// backquotes exists, so that moving a file or renaming a heading cannot leave a reader at a
// dead end.
package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, two levels above this package.
const root = "../.."

// documents are the Markdown files a reader follows links between: the README, docs/ and the
// READMEs of the chart, the modules and the examples.
func documents(t *testing.T) []string {
	t.Helper()
	var docs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel != "." && strings.HasPrefix(d.Name(), "."), rel == "bin", d.Name() == "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".md") && (rel == "README.md" || strings.HasPrefix(rel, "docs/") ||
			strings.HasPrefix(rel, "charts/") || strings.HasPrefix(rel, "modules/") || strings.HasPrefix(rel, "examples/")) {
			docs = append(docs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing documents: %v", err)
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d documents under %s: %v", len(docs), root, docs)
	}
	return docs
}

var (
	// fence opens or closes a code block.
	fence = regexp.MustCompile("^\\s*(```|~~~)")
	// inlineLink is [text](target) or [text](target "title"); images too.
	inlineLink = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpan is a backquoted span on one line.
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// repoPath is a path into the repository's own top-level folders.
	repoPath = regexp.MustCompile(`^(?:api|cmd|internal|modules|test|charts|examples|hack|docs)/[A-Za-z0-9_./-]*$`)
	heading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// prose is a document's lines outside code blocks, numbered from 1.
type line struct {
	n    int
	text string
}

func prose(text string) []line {
	var out []line
	in := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			out = append(out, line{i + 1, l})
		}
	}
	return out
}

// anchors are the fragments GitHub gives a document's headings: lower case, punctuation
// dropped, spaces as hyphens, a repeated heading numbered -1, -2, ...
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range prose(text) {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		slug := slugify(m[2])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func slugify(title string) string {
	// A heading's link text counts, its target does not.
	title = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestRelativeLinksResolve(t *testing.T) {
	texts := map[string]string{}
	read := func(rel string) (string, error) {
		if s, ok := texts[rel]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return "", err
		}
		texts[rel] = string(b)
		return texts[rel], nil
	}
	links := 0
	for _, doc := range documents(t) {
		text, err := read(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range prose(text) {
			// Code spans are not links: drop them before looking for links.
			plain := codeSpan.ReplaceAllString(l.text, "")
			for _, m := range inlineLink.FindAllStringSubmatch(plain, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				file, frag, _ := strings.Cut(target, "#")
				rel := doc
				if file != "" {
					rel = filepath.Clean(filepath.Join(filepath.Dir(doc), file))
					if strings.HasPrefix(rel, "..") {
						t.Errorf("%s:%d: link %s leaves the repository", doc, l.n, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
						t.Errorf("%s:%d: link %s: %s does not exist", doc, l.n, target, rel)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(rel, ".md") {
					t.Errorf("%s:%d: link %s: a fragment of a file that is not Markdown", doc, l.n, target)
					continue
				}
				other, err := read(rel)
				if err != nil {
					t.Errorf("%s:%d: link %s: %v", doc, l.n, target, err)
					continue
				}
				if !anchors(other)[frag] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", doc, l.n, target, rel, frag)
				}
			}
		}
	}
	if links < 50 {
		t.Errorf("found only %d relative links: the link pattern no longer matches the documents", links)
	}
}

func TestNamedPathsExist(t *testing.T) {
	paths := 0
	for _, doc := range documents(t) {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range prose(string(b)) {
			for _, m := range codeSpan.FindAllStringSubmatch(l.text, -1) {
				p := strings.TrimRight(m[1], ".,:;")
				if !repoPath.MatchString(p) {
					continue
				}
				paths++
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s:%d: `%s` names a path that does not exist", doc, l.n, p)
				}
			}
		}
	}
	if paths < 50 {
		t.Errorf("found only %d repository paths: the path pattern no longer matches the documents", paths)
	}
}

func TestSlugify(t *testing.T) {
	for title, want := range map[string]string{
		"Where is my node?":                     "where-is-my-node",
		"State, locks and encryption":           "state-locks-and-encryption",
		"The class's checks":                    "the-classs-checks",
		"Deadlines and Karpenter's window":      "deadlines-and-karpenters-window",
		"The stand-in and `make demo-hcloud`":   "the-stand-in-and-make-demo-hcloud",
		"20 Hetzner Cloud claims, provider IDs": "20-hetzner-cloud-claims-provider-ids",
		"fulfiller.sh/v1alpha1":                 "fulfillershv1alpha1",
		"[a link](x.md) in a heading":           "a-link-in-a-heading",
	} {
		if got := slugify(title); got != want {
			t.Errorf("slugify(%q) = %q, want %q", title, got, want)
		}
	}
	got := anchors("# A\n## A\n```\n# not a heading\n```\n### A\n")
	for _, want := range []string{"a", "a-1", "a-2"} {
		if !got[want] {
			t.Errorf("anchors: no %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("anchors: a comment in a code block counted as a heading")
	}
}
