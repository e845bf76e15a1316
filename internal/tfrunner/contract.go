// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/terraform-config-inspect/tfconfig"
)

// Violation is one way a module breaks the module contract (modules/README.md), with the
// file and line it is at when it is at one.
type Violation struct {
	// File is the file's name relative to the module's folder; empty for what the module as
	// a whole lacks (e.g. the provider_id output).
	File    string
	Line    int
	Message string
}

func (v Violation) String() string {
	switch {
	case v.File == "":
		return v.Message
	case v.Line == 0:
		return v.File + ": " + v.Message
	}
	return fmt.Sprintf("%s:%d: %s", v.File, v.Line, v.Message)
}

// contractTypes are the types the fulfiller's variables file gives each contract variable, and
// the type constraints a module may declare for them.
var contractTypes = map[string][]string{
	VarNodeName:   {"string"},
	VarNodeType:   {"string"},
	VarZone:       {"string"},
	VarUserData:   {"string"},
	VarLabels:     {"map(string)", "map(any)"},
	VarParameters: {"map(string)", "map(any)"},
}

// CheckModuleDir is the static module contract check, the same for a class's module and for
// `fulfiller module check`: the module outputs provider_id; it requires no variable the
// fulfiller does not pass; the contract variables it declares have the types the fulfiller
// passes, user_data marked sensitive; it keeps no backend or cloud block (the fulfiller owns
// the state); every provider it uses has a version constraint. It reads the HCL only and runs
// nothing. The violations are sorted by file and line; the error (wrapping ErrInvalidModule)
// is for a folder that cannot be read or HCL that does not parse, with file and line.
func CheckModuleDir(dir string) ([]Violation, error) {
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("%w: module folder %s cannot be read", ErrInvalidModule, dir)
	}
	mod, diags := tfconfig.LoadModuleFromFilesystem(tofuFS{tfconfig.NewOsFs()}, dir)
	for _, d := range diags {
		if d.Severity == tfconfig.DiagError {
			where := ""
			if d.Pos != nil {
				where = fmt.Sprintf("%s:%d: ", relFile(dir, d.Pos.Filename), d.Pos.Line)
			}
			return nil, fmt.Errorf("%w: %s%s: %s", ErrInvalidModule, where, d.Summary, d.Detail)
		}
	}
	blocks, err := readTerraformBlocks(dir)
	if err != nil {
		return nil, err
	}
	var out []Violation
	if _, ok := mod.Outputs[OutputProviderID]; !ok {
		out = append(out, Violation{Message: "the module has no output " + OutputProviderID})
	}
	for name, v := range mod.Variables {
		at := func(msg string) Violation {
			return Violation{File: relFile(dir, v.Pos.Filename), Line: v.Pos.Line, Message: msg}
		}
		want, known := contractTypes[name]
		if !known {
			if v.Required {
				out = append(out, at(fmt.Sprintf("variable %q is required but the fulfiller does not pass it (it passes %s); give it a default or read it from parameters", name, strings.Join(ContractVariables, ", "))))
			}
			continue
		}
		if !typeAllowed(v.Type, want) {
			out = append(out, at(fmt.Sprintf("variable %q has type %s; the fulfiller passes %s", name, v.Type, want[0])))
		}
		if name == VarUserData && !v.Sensitive {
			out = append(out, at(fmt.Sprintf("variable %q must be marked sensitive = true (it holds the claim's bootstrap token)", name)))
		}
	}
	for _, b := range blocks.backends {
		out = append(out, Violation{File: relFile(dir, b.file), Line: b.line, Message: fmt.Sprintf("the module keeps a %s block; the fulfiller configures each claim's state itself (spec.backend), so remove it", b.kind)})
	}
	out = append(out, unpinnedProviders(dir, mod, blocks.providers)...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Line < out[j].Line
	})
	return out, nil
}

// ViolationsError joins violations into one error wrapping ErrInvalidModule, nil for none.
func ViolationsError(vs []Violation) error {
	if len(vs) == 0 {
		return nil
	}
	msgs := make([]string, len(vs))
	for i, v := range vs {
		msgs[i] = v.String()
	}
	return fmt.Errorf("%w: %s", ErrInvalidModule, strings.Join(msgs, "; "))
}

func typeAllowed(declared string, want []string) bool {
	t := strings.Join(strings.Fields(declared), "")
	if t == "" || t == "any" {
		return true
	}
	for _, w := range want {
		if t == w {
			return true
		}
	}
	return false
}

// unpinnedProviders reports each provider the module requires or uses with no version
// constraint, at its required_providers entry, else at the first block that uses it. The
// built-in provider (terraform_data, terraform_remote_state) needs none.
func unpinnedProviders(dir string, mod *tfconfig.Module, entries map[string]position) []Violation {
	used := map[string]tfconfig.SourcePos{}
	for _, rs := range []map[string]*tfconfig.Resource{mod.ManagedResources, mod.DataResources} {
		for _, r := range rs {
			p, seen := used[r.Provider.Name]
			if !seen || r.Pos.Filename < p.Filename || (r.Pos.Filename == p.Filename && r.Pos.Line < p.Line) {
				used[r.Provider.Name] = r.Pos
			}
		}
	}
	names := map[string]bool{}
	for name := range mod.RequiredProviders {
		names[name] = true
	}
	for name := range used {
		names[name] = true
	}
	var out []Violation
	for name := range names {
		if name == "terraform" {
			continue
		}
		if req := mod.RequiredProviders[name]; req != nil && len(req.VersionConstraints) > 0 {
			continue
		}
		v := Violation{Message: fmt.Sprintf("provider %q has no version constraint; pin it in required_providers so that every run of a claim uses the same provider", name)}
		if e, ok := entries[name]; ok {
			v.File, v.Line = relFile(dir, e.file), e.line
		} else if p, ok := used[name]; ok {
			v.File, v.Line = relFile(dir, p.Filename), p.Line
		}
		out = append(out, v)
	}
	return out
}

type position struct {
	kind, file string
	line       int
}

type terraformBlocks struct {
	backends  []position
	providers map[string]position // required_providers entries by local name
}

var (
	rootSchema      = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "terraform"}}}
	terraformSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "backend", LabelNames: []string{"type"}},
		{Type: "cloud"},
		{Type: "required_providers"},
	}}
)

// readTerraformBlocks finds the backend and cloud blocks and the required_providers entries
// in the module's terraform blocks, which terraform-config-inspect reads without positions.
func readTerraformBlocks(dir string) (terraformBlocks, error) {
	tb := terraformBlocks{providers: map[string]position{}}
	files, err := moduleFiles(dir)
	if err != nil {
		return tb, err
	}
	parser := hclparse.NewParser()
	for _, path := range files {
		var f *hcl.File
		var diags hcl.Diagnostics
		if strings.HasSuffix(path, ".json") {
			f, diags = parser.ParseJSONFile(path)
		} else {
			f, diags = parser.ParseHCLFile(path)
		}
		if diags.HasErrors() {
			return tb, fmt.Errorf("%w: %s", ErrInvalidModule, hclError(dir, diags))
		}
		content, _, _ := f.Body.PartialContent(rootSchema)
		for _, t := range content.Blocks {
			inner, _, _ := t.Body.PartialContent(terraformSchema)
			for _, b := range inner.Blocks {
				switch b.Type {
				case "backend":
					tb.backends = append(tb.backends, position{kind: fmt.Sprintf("backend %q", b.Labels[0]), file: path, line: b.DefRange.Start.Line})
				case "cloud":
					tb.backends = append(tb.backends, position{kind: "cloud", file: path, line: b.DefRange.Start.Line})
				case "required_providers":
					attrs, _ := b.Body.JustAttributes()
					for name, a := range attrs {
						tb.providers[name] = position{file: path, line: a.NameRange.Start.Line}
					}
				}
			}
		}
	}
	return tb, nil
}

func hclError(dir string, diags hcl.Diagnostics) string {
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if d.Subject != nil {
			return fmt.Sprintf("%s:%d: %s: %s", relFile(dir, d.Subject.Filename), d.Subject.Start.Line, d.Summary, d.Detail)
		}
		return d.Summary + ": " + d.Detail
	}
	return diags.Error()
}

// moduleFiles lists the configuration files tofu reads in dir: *.tf, *.tf.json, *.tofu and
// *.tofu.json, an x.tofu hiding the x.tf beside it. Override files are included.
func moduleFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: module folder %s cannot be read", ErrInvalidModule, dir)
	}
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Name()] = true
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		if _, ok := tfName(name); ok {
			files = append(files, filepath.Join(dir, name))
			continue
		}
		if alt, ok := tofuName(name); ok && !present[alt] {
			files = append(files, filepath.Join(dir, name))
		}
	}
	return files, nil
}

func relFile(dir, file string) string {
	if rel, err := filepath.Rel(dir, file); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return file
}
