// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
)

// TestPackerRecipe reads images/hetzner-cloud/node.pkr.hcl with the HCL parser Packer uses
// (Packer itself cannot be built here): its blocks are Packer's, every variable it refers to
// is declared, the file it uploads is this package's install script, to the path the user
// data puts it, the environment it runs the script with is what the script reads, and the
// snapshot's labels are valid Hetzner labels that images/README.md's selector matches.
func TestPackerRecipe(t *testing.T) {
	dir := filepath.Join("..", "..", "images", "hetzner-cloud")
	file, diags := hclparse.NewParser().ParseHCLFile(filepath.Join(dir, "node.pkr.hcl"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	top, diags := file.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "packer"}, {Type: "variable", LabelNames: []string{"name"}}, {Type: "locals"},
		{Type: "source", LabelNames: []string{"type", "name"}}, {Type: "build"},
	}})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	vars := map[string]cty.Value{}
	for _, b := range top.Blocks.OfType("variable") {
		vars[b.Labels[0]] = cty.StringVal("")
	}
	vars["kubernetes_version"], vars["image"] = cty.StringVal("v1.36.3"), cty.StringVal("ubuntu-24.04")
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{
		"var":  cty.ObjectVal(vars),
		"path": cty.ObjectVal(map[string]cty.Value{"root": cty.StringVal(dir)}),
	}}
	declared := func(expr hcl.Expression) {
		t.Helper()
		for _, ref := range expr.Variables() {
			if ref.RootName() != "var" {
				continue
			}
			attr, ok := ref[1].(hcl.TraverseAttr)
			if _, known := vars[attr.Name]; !ok || !known {
				t.Errorf("%s refers to an undeclared variable", ref.SourceRange())
			}
		}
	}
	attrs := func(body hcl.Body) hcl.Attributes {
		t.Helper()
		a, diags := body.JustAttributes()
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		for _, attr := range a {
			declared(attr.Expr)
		}
		return a
	}
	eval := func(attr *hcl.Attribute, ctx *hcl.EvalContext) cty.Value {
		t.Helper()
		v, diags := attr.Expr.Value(ctx)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		return v
	}

	// The snapshot's labels: valid Hetzner label values, matched by the documented selector.
	locals := attrs(top.Blocks.OfType("locals")[0].Body)
	labels := eval(locals["labels"], ctx)
	value := regexp.MustCompile(`^([a-z0-9A-Z]([-_.a-z0-9A-Z]{0,61}[a-z0-9A-Z])?)?$`)
	for k, v := range labels.AsValueMap() {
		if !value.MatchString(v.AsString()) {
			t.Errorf("label %s=%q is not a Hetzner label value", k, v.AsString())
		}
	}
	readme, err := os.ReadFile(filepath.Join(dir, "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	selector := regexp.MustCompile(`image_selector: (\S+)`).FindSubmatch(readme)
	if selector == nil {
		t.Fatal("images/README.md shows no image_selector")
	}
	for _, term := range strings.Split(string(selector[1]), ",") {
		k, v, _ := strings.Cut(term, "=")
		if got, ok := labels.AsValueMap()[k]; !ok || got.AsString() != v {
			t.Errorf("the README's selector term %s does not match the snapshot's labels %#v", term, labels.AsValueMap())
		}
	}
	ctx.Variables["local"] = cty.ObjectVal(map[string]cty.Value{"labels": labels})

	sources := top.Blocks.OfType("source")
	if len(sources) != 1 || sources[0].Labels[0] != "hcloud" {
		t.Fatalf("sources %v, want one of the hcloud builder", sources)
	}
	source := attrs(sources[0].Body)
	for _, name := range []string{"image", "location", "server_type", "ssh_username", "snapshot_name", "snapshot_labels"} {
		if source[name] == nil {
			t.Errorf("the hcloud source sets no %s", name)
		}
	}

	build, diags := top.Blocks.OfType("build")[0].Body.Content(&hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "sources", Required: true}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "provisioner", LabelNames: []string{"type"}}},
	})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := "source." + sources[0].Labels[0] + "." + sources[0].Labels[1]
	if got := eval(build.Attributes["sources"], ctx).AsValueSlice(); len(got) != 1 || got[0].AsString() != want {
		t.Errorf("the build's sources %v, want [%s]", got, want)
	}
	var uploaded, ran bool
	for _, p := range build.Blocks.OfType("provisioner") {
		a := attrs(p.Body)
		switch p.Labels[0] {
		case "file":
			from := eval(a["source"], ctx).AsString()
			script, err := os.ReadFile(from)
			if err != nil {
				t.Fatalf("the file provisioner's source: %v", err)
			}
			if !bytes.Equal(script, InstallScript) {
				t.Errorf("%s is not the install script", from)
			}
			if to := eval(a["destination"], ctx).AsString(); to != InstallScriptPath {
				t.Errorf("the install script goes to %s, want %s as in the user data", to, InstallScriptPath)
			}
			uploaded = true
		case "shell":
			if a["environment_vars"] != nil {
				for _, v := range eval(a["environment_vars"], ctx).AsValueSlice() {
					name, _, _ := strings.Cut(v.AsString(), "=")
					if !regexp.MustCompile(`\$\{?` + regexp.QuoteMeta(name) + `\b`).Match(InstallScript) {
						t.Errorf("the recipe sets %s, which the install script does not read", name)
					}
				}
			}
			if a["inline"] != nil {
				for _, line := range eval(a["inline"], ctx).AsValueSlice() {
					ran = ran || line.AsString() == "sh "+InstallScriptPath
				}
			}
		default:
			t.Errorf("unexpected provisioner %s", p.Labels[0])
		}
	}
	if !uploaded || !ran {
		t.Errorf("the build uploads the install script: %t, runs it: %t", uploaded, ran)
	}
}
