// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"runtime/debug"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// licenses of the programs the image ships, by Go main module (their LICENSE files are in
// the image under /usr/share/licenses).
var licenses = map[string]string{
	"github.com/fulfiller-sh/fulfiller":                 "Apache-2.0",
	"github.com/opentofu/opentofu":                      "MPL-2.0",
	"github.com/hetznercloud/terraform-provider-hcloud": "MPL-2.0",
	"github.com/gavinbunney/terraform-provider-kubectl": "MPL-2.0",
	"golang.org/x/crypto/x509roots/fallback":            "BSD-3-Clause AND MPL-2.0",
}

// writeSBOM writes a CycloneDX SBOM of one platform's image: the image, every Go program in
// it with the modules it was built from (its build information, which the go command
// embeds), the CA certificates' module and the shipped modules' files.
func writeSBOM(file string, o options, arch string, img v1.Image, files []fileEntry) error {
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	bom := cdx.NewBOM()
	bom.SerialNumber = "urn:uuid:" + uuidFrom(digest.String())
	bom.Metadata = &cdx.Metadata{
		Timestamp: o.epoch.Format("2006-01-02T15:04:05Z"),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: "hack/image", Group: "github.com/fulfiller-sh/fulfiller", Version: o.version,
		}}},
		Component: &cdx.Component{
			BOMRef: "image", Type: cdx.ComponentTypeContainer, Name: o.repository, Version: o.version,
			PackageURL: fmt.Sprintf("pkg:oci/fulfiller@%s?arch=%s&repository_url=%s", digest, arch, o.repository),
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: digest.Hex}},
			Licenses:   license("Apache-2.0"),
		},
	}
	var components []cdx.Component
	for _, f := range files {
		if f.kind != kindFile {
			continue
		}
		c, err := fileComponent(f)
		if err != nil {
			return fmt.Errorf("sbom: %s: %w", f.path, err)
		}
		if c != nil {
			components = append(components, *c)
		}
	}
	components = append(components, cdx.Component{
		BOMRef: "ca-certificates", Type: cdx.ComponentTypeData, Name: "golang.org/x/crypto/x509roots/fallback",
		Version: caModuleVersion(), PackageURL: "pkg:golang/golang.org/x/crypto/x509roots/fallback@" + caModuleVersion(),
		Description: "Mozilla's trusted roots, written to " + certsPath,
		Licenses:    expression(licenses["golang.org/x/crypto/x509roots/fallback"]),
	})
	bom.Components = &components
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return fmt.Errorf("sbom: %w", err)
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

// fileComponent describes a file: a Go program with its modules, or (under /modules) a file
// of a shipped module; other files are described by the components that put them there.
func fileComponent(f fileEntry) (*cdx.Component, error) {
	sum, err := fileSHA256(f)
	if err != nil {
		return nil, err
	}
	hashes := &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}}
	if f.src != "" {
		if info, err := buildinfo.ReadFile(f.src); err == nil {
			return goProgram(f.path, info, hashes), nil
		}
	}
	if strings.HasPrefix(f.path, modulesPath+"/") {
		return &cdx.Component{
			BOMRef: f.path, Type: cdx.ComponentTypeFile, Name: f.path, Hashes: hashes, Licenses: license("Apache-2.0"),
		}, nil
	}
	return nil, nil
}

// goProgram is a Go binary as a component, the modules it was built from nested.
func goProgram(file string, info *buildinfo.BuildInfo, hashes *[]cdx.Hash) *cdx.Component {
	ver := info.Main.Version
	if ver == "" || ver == "(devel)" {
		ver = versionFromPath(file)
	}
	c := &cdx.Component{
		BOMRef: file, Type: cdx.ComponentTypeApplication, Name: info.Main.Path, Version: ver,
		PackageURL:  "pkg:golang/" + info.Main.Path + "@" + ver,
		Description: file + ", built with " + info.GoVersion,
		Hashes:      hashes,
		Licenses:    license(licenses[info.Main.Path]),
	}
	var props []cdx.Property
	for _, s := range info.Settings {
		switch s.Key {
		case "GOOS", "GOARCH", "CGO_ENABLED", "-trimpath", "vcs.revision", "vcs.time", "vcs.modified":
			props = append(props, cdx.Property{Name: "go:build:" + s.Key, Value: s.Value})
		}
	}
	c.Properties = &props
	var deps []cdx.Component
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		deps = append(deps, goModule(m))
	}
	c.Components = &deps
	return c
}

func goModule(m *debug.Module) cdx.Component {
	c := cdx.Component{
		BOMRef: "pkg:golang/" + m.Path + "@" + m.Version, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version,
		PackageURL: "pkg:golang/" + m.Path + "@" + m.Version,
	}
	if m.Sum != "" {
		c.Properties = &[]cdx.Property{{Name: "go:module:sum", Value: m.Sum}}
	}
	return c
}

// versionFromPath reads the version a provider's name in the mirror carries
// (terraform-provider-<type>_v<version>), or returns "" for other files.
func versionFromPath(file string) string {
	b := path.Base(file)
	if i := strings.LastIndex(b, "_v"); strings.HasPrefix(b, "terraform-provider-") && i > 0 {
		return b[i+2:]
	}
	return ""
}

func license(id string) *cdx.Licenses {
	if id == "" {
		return nil
	}
	return &cdx.Licenses{{License: &cdx.License{ID: id}}}
}

func expression(e string) *cdx.Licenses {
	return &cdx.Licenses{{Expression: e}}
}

func fileSHA256(f fileEntry) (string, error) {
	h := sha256.New()
	if f.src == "" {
		h.Write(f.data)
	} else {
		r, err := os.Open(f.src)
		if err != nil {
			return "", err
		}
		defer r.Close()
		if _, err := io.Copy(h, r); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// caModuleVersion is the version of the CA certificates' module this program was built with.
func caModuleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "golang.org/x/crypto/x509roots/fallback" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// uuidFrom is a name-based UUID (version 5 layout over SHA-256) of s: the same image has the
// same serial number.
func uuidFrom(s string) string {
	sum := sha256.Sum256([]byte(s))
	sum[6] = sum[6]&0x0f | 0x50
	sum[8] = sum[8]&0x3f | 0x80
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// writeFileList writes every file of the image with its size and mode, one a line.
func writeFileList(file string, list []fileEntry) error {
	var b strings.Builder
	var total int64
	for _, f := range list {
		if f.kind == kindDir {
			fmt.Fprintf(&b, "%-12s %04o %5d %s/\n", "-", f.mode, f.uid, f.path)
			continue
		}
		total += f.size
		fmt.Fprintf(&b, "%12d %04o %5d %s\n", f.size, f.mode, f.uid, f.path)
	}
	fmt.Fprintf(&b, "%12d total bytes in files\n", total)
	return os.WriteFile(file, []byte(b.String()), 0o644)
}
