// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// MirroredProvider is one provider package in a filesystem mirror.
type MirroredProvider struct {
	// Source is the provider's address, hostname/namespace/type.
	Source  string `json:"source"`
	Version string `json:"version"`
	// Platform is os_arch.
	Platform string `json:"platform"`
	// Mirror is the mirror's folder.
	Mirror string `json:"mirror"`
}

func (p MirroredProvider) String() string {
	return fmt.Sprintf("%s %s (%s)", p.Source, p.Version, p.Platform)
}

// FilesystemMirrors returns the paths of the filesystem_mirror blocks of an OpenTofu CLI
// configuration file (HCL, or JSON when the name ends in .json), in their order.
func FilesystemMirrors(cliConfig string) ([]string, error) {
	parser := hclparse.NewParser()
	var file *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(cliConfig, ".json") {
		file, diags = parser.ParseJSONFile(cliConfig)
	} else {
		file, diags = parser.ParseHCLFile(cliConfig)
	}
	if diags.HasErrors() {
		return nil, fmt.Errorf("reading the CLI configuration %s: %w", cliConfig, diags)
	}
	var config struct {
		Installation []struct {
			Mirrors []struct {
				Path   string   `hcl:"path"`
				Remain hcl.Body `hcl:",remain"`
			} `hcl:"filesystem_mirror,block"`
			Remain hcl.Body `hcl:",remain"`
		} `hcl:"provider_installation,block"`
		Remain hcl.Body `hcl:",remain"`
	}
	if diags := gohcl.DecodeBody(file.Body, nil, &config); diags.HasErrors() {
		return nil, fmt.Errorf("reading the CLI configuration %s: %w", cliConfig, diags)
	}
	var paths []string
	for _, inst := range config.Installation {
		for _, m := range inst.Mirrors {
			paths = append(paths, m.Path)
		}
	}
	return paths, nil
}

// packedProvider is a packed mirror entry's file name: terraform-provider-TYPE_VERSION_OS_ARCH.zip.
var packedProvider = regexp.MustCompile(`^terraform-provider-([^_]+)_([^_]+)_([^_]+_[^_]+)\.zip$`)

// ListMirror lists the provider packages in a filesystem mirror, in both of OpenTofu's
// layouts: unpacked, HOSTNAME/NAMESPACE/TYPE/VERSION/OS_ARCH/, and packed,
// HOSTNAME/NAMESPACE/TYPE/terraform-provider-TYPE_VERSION_OS_ARCH.zip. A mirror that does not
// exist has none.
func ListMirror(mirror string) ([]MirroredProvider, error) {
	var found []MirroredProvider
	err := filepath.WalkDir(mirror, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == mirror && errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll
			}
			return err
		}
		rel, err := filepath.Rel(mirror, path)
		if err != nil {
			return err
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		switch {
		case len(parts) == 5 && isDir(path, d):
			found = append(found, MirroredProvider{Source: strings.Join(parts[:3], "/"), Version: parts[3], Platform: parts[4], Mirror: mirror})
			return filepath.SkipDir
		case len(parts) == 4 && !d.IsDir():
			if m := packedProvider.FindStringSubmatch(parts[3]); m != nil && m[1] == parts[2] {
				found = append(found, MirroredProvider{Source: strings.Join(parts[:3], "/"), Version: m[2], Platform: m[3], Mirror: mirror})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the provider mirror %s: %w", mirror, err)
	}
	slices.SortFunc(found, func(a, b MirroredProvider) int {
		return strings.Compare(a.Source+" "+a.Version+" "+a.Platform, b.Source+" "+b.Version+" "+b.Platform)
	})
	return found, nil
}

// isDir is whether a walked entry is a folder or a symbolic link to one (a mirror may link
// its platform folders).
func isDir(path string, d fs.DirEntry) bool {
	if d.IsDir() {
		return true
	}
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
