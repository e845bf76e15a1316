// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-config-inspect/tfconfig"
)

// Names in the module contract (modules/README.md).
const (
	VarNodeName   = "node_name"
	VarNodeType   = "node_type"
	VarZone       = "zone"
	VarUserData   = "user_data"
	VarLabels     = "labels"
	VarParameters = "parameters"

	OutputProviderID = "provider_id"
	OutputNodeName   = "node_name"
	OutputAddresses  = "addresses"
)

// ContractVariables are the variables the fulfiller passes to a module.
var ContractVariables = []string{VarNodeName, VarNodeType, VarZone, VarUserData, VarLabels, VarParameters}

// ModuleInfo is what the fulfiller needs to know about a module, read from its HCL without
// running tofu.
type ModuleInfo struct {
	Variables map[string]ModuleVariable
	Outputs   map[string]ModuleOutput
}

// ModuleVariable is a declared input variable.
type ModuleVariable struct {
	Required  bool
	Sensitive bool
}

// ModuleOutput is a declared output.
type ModuleOutput struct {
	Sensitive bool
}

// InspectModule reads the variables and outputs a module declares. Files ending in .tofu and
// .tofu.json are read, and take precedence over a .tf/.tf.json file of the same base name, as
// in OpenTofu. Errors wrap ErrInvalidModule.
func InspectModule(dir string) (*ModuleInfo, error) {
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("%w: module folder %s cannot be read", ErrInvalidModule, dir)
	}
	mod, diags := tfconfig.LoadModuleFromFilesystem(tofuFS{tfconfig.NewOsFs()}, dir)
	for _, d := range diags {
		if d.Severity == tfconfig.DiagError {
			where := ""
			if d.Pos != nil {
				where = fmt.Sprintf(" (%s:%d)", filepath.Base(d.Pos.Filename), d.Pos.Line)
			}
			return nil, fmt.Errorf("%w: %s: %s%s", ErrInvalidModule, d.Summary, d.Detail, where)
		}
	}
	info := &ModuleInfo{
		Variables: make(map[string]ModuleVariable, len(mod.Variables)),
		Outputs:   make(map[string]ModuleOutput, len(mod.Outputs)),
	}
	for name, v := range mod.Variables {
		info.Variables[name] = ModuleVariable{Required: v.Required, Sensitive: v.Sensitive}
	}
	for name, o := range mod.Outputs {
		info.Outputs[name] = ModuleOutput{Sensitive: o.Sensitive}
	}
	return info, nil
}

// CheckContract reports how the module breaks the module contract: it must output
// provider_id, may only require variables the fulfiller passes, and must mark user_data
// sensitive when it declares it. The error wraps ErrInvalidModule.
func (m *ModuleInfo) CheckContract() error {
	var problems []string
	if _, ok := m.Outputs[OutputProviderID]; !ok {
		problems = append(problems, "it has no output "+OutputProviderID)
	}
	var unknown []string
	for name, v := range m.Variables {
		if v.Required && !isContractVariable(name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		problems = append(problems, "it requires variables the fulfiller does not pass: "+strings.Join(unknown, ", "))
	}
	if v, ok := m.Variables[VarUserData]; ok && !v.Sensitive {
		problems = append(problems, "its variable "+VarUserData+" is not marked sensitive")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidModule, strings.Join(problems, "; "))
	}
	return nil
}

func isContractVariable(name string) bool {
	for _, v := range ContractVariables {
		if v == name {
			return true
		}
	}
	return false
}

// tofuFS shows terraform-config-inspect each x.tofu file as x.tf (and x.tofu.json as
// x.tf.json), hiding the .tf file it overrides.
type tofuFS struct{ tfconfig.FS }

func (f tofuFS) ReadDir(dir string) ([]os.FileInfo, error) {
	infos, err := f.FS.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	tofu := map[string]bool{}
	for _, info := range infos {
		if tf, ok := tfName(info.Name()); ok && !info.IsDir() {
			tofu[tf] = true
		}
	}
	out := make([]os.FileInfo, 0, len(infos))
	for _, info := range infos {
		switch tf, ok := tfName(info.Name()); {
		case info.IsDir():
			out = append(out, info)
		case ok:
			out = append(out, renamed{info, tf})
		case !tofu[info.Name()]:
			out = append(out, info)
		}
	}
	return out, nil
}

func (f tofuFS) ReadFile(name string) ([]byte, error) {
	if alt, ok := tofuName(name); ok {
		if data, err := f.FS.ReadFile(alt); err == nil {
			return data, nil
		}
	}
	return f.FS.ReadFile(name)
}

// tfName maps x.tofu to x.tf and x.tofu.json to x.tf.json.
func tfName(name string) (string, bool) {
	switch {
	case strings.HasSuffix(name, ".tofu"):
		return strings.TrimSuffix(name, ".tofu") + ".tf", true
	case strings.HasSuffix(name, ".tofu.json"):
		return strings.TrimSuffix(name, ".tofu.json") + ".tf.json", true
	}
	return "", false
}

// tofuName maps x.tf to x.tofu and x.tf.json to x.tofu.json.
func tofuName(name string) (string, bool) {
	switch {
	case strings.HasSuffix(name, ".tf"):
		return strings.TrimSuffix(name, ".tf") + ".tofu", true
	case strings.HasSuffix(name, ".tf.json"):
		return strings.TrimSuffix(name, ".tf.json") + ".tofu.json", true
	}
	return "", false
}

type renamed struct {
	os.FileInfo
	name string
}

func (r renamed) Name() string { return r.name }
