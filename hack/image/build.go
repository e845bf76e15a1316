// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths in the image.
const (
	fulfillerPath = "/usr/local/bin/fulfiller"
	tofuPath      = "/usr/local/bin/tofu"
	mirrorPath    = "/opt/tofu/providers"
	tofurcPath    = "/etc/fulfiller/tofurc"
	modulesPath   = "/modules"
	homePath      = "/home/fulfiller"
	certsPath     = "/etc/ssl/certs/ca-certificates.crt"
	licensesPath  = "/usr/share/licenses"
	// user is the image's user and group, numeric (the chart's securityContext says the same).
	user = 65532
	// providerHost is where provider addresses without a hostname live.
	providerHost = "registry.opentofu.org"
)

//go:embed tofurc
var tofurc []byte

type result struct {
	index     string
	platforms []platformResult
}

type platformResult struct {
	arch, digest            string
	files                   int
	size, compressed        int64
	list                    []fileEntry
	tarball, sbom, fileList string
}

func build(ctx context.Context, o options) (result, error) {
	mods, err := shippedModules(filepath.Join(o.root, "modules"))
	if err != nil {
		return result{}, err
	}
	revision, err := gitRevision(o.root)
	if err != nil {
		return result{}, err
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(o.out)), 0o755); err != nil {
		return result{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(o.out)), ".image-")
	if err != nil {
		return result{}, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	ref, err := name.NewTag(o.repository + ":" + o.version)
	if err != nil {
		return result{}, fmt.Errorf("image name: %w", err)
	}

	var res result
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range o.arches {
		bin := filepath.Join(tmp, "fulfiller-"+arch)
		if err := buildFulfiller(ctx, o, arch, bin); err != nil {
			return result{}, err
		}
		img, pr, err := platformImage(o, arch, bin, mods, revision)
		if err != nil {
			return result{}, fmt.Errorf("linux/%s: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
		base := fmt.Sprintf("fulfiller-%s-linux-%s", o.version, arch)
		pr.tarball = base + ".tar"
		if err := tarball.WriteToFile(filepath.Join(tmp, pr.tarball), ref, img); err != nil {
			return result{}, fmt.Errorf("writing %s: %w", pr.tarball, err)
		}
		pr.sbom = base + ".cdx.json"
		if err := writeSBOM(filepath.Join(tmp, pr.sbom), o, arch, img, pr.list); err != nil {
			return result{}, err
		}
		pr.fileList = base + ".files.txt"
		if err := writeFileList(filepath.Join(tmp, pr.fileList), pr.list); err != nil {
			return result{}, err
		}
		res.platforms = append(res.platforms, pr)
	}
	digest, err := idx.Digest()
	if err != nil {
		return result{}, err
	}
	res.index = digest.String()
	p, err := layout.Write(filepath.Join(tmp, "oci"), empty.Index)
	if err != nil {
		return result{}, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.version,
	})); err != nil {
		return result{}, fmt.Errorf("writing the OCI layout: %w", err)
	}
	for _, arch := range o.arches {
		_ = os.Remove(filepath.Join(tmp, "fulfiller-"+arch))
	}
	if err := os.RemoveAll(o.out); err != nil {
		return result{}, err
	}
	if err := os.Rename(tmp, o.out); err != nil {
		return result{}, err
	}
	return res, nil
}

// buildFulfiller builds cmd/fulfiller for linux/arch as make build does, stripped.
func buildFulfiller(ctx context.Context, o options, arch, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+o.version, "-o", out, "./cmd/fulfiller")
	cmd.Dir = o.root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = os.Stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building cmd/fulfiller for linux/%s: %w\n%s", arch, err, stderr.String())
	}
	return nil
}

func gitRevision(root string) (string, error) {
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("reading the commit (git rev-parse HEAD): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// platformImage assembles the image of one platform.
func platformImage(o options, arch, fulfiller string, mods []module, revision string) (v1.Image, platformResult, error) {
	pr := platformResult{arch: arch}
	tools := o.toolsFor(arch)
	tofu, err := filepath.EvalSymlinks(filepath.Join(tools, "bin", "tofu"))
	if err != nil {
		return nil, pr, fmt.Errorf("tofu for linux/%s (TOOLS=tofu TOOLS_ARCH=%s hack/tools.sh builds it): %w", arch, arch, err)
	}
	base, err := baseLayer(o, arch, tofu, mods)
	if err != nil {
		return nil, pr, err
	}
	providers, err := providersLayer(filepath.Join(tools, "providers"), arch, mods)
	if err != nil {
		return nil, pr, err
	}
	modules, err := modulesLayer(o.root, mods)
	if err != nil {
		return nil, pr, err
	}
	tofuLayer, err := single(tofuPath, tofu)
	if err != nil {
		return nil, pr, err
	}
	fulfillerLayer, err := single(fulfillerPath, fulfiller)
	if err != nil {
		return nil, pr, err
	}
	layers := []struct {
		what  string
		files *tree
	}{
		// From the least to the most often changed, so a new fulfiller is one new layer.
		{"base: users, CA certificates, licenses, writable folders", base},
		{"tofu " + toolVersion(tofu), tofuLayer},
		{"provider mirror of the shipped modules' providers, and its CLI configuration", providers},
		{"the shipped modules", modules},
		{"fulfiller " + o.version, fulfillerLayer},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		layer, err := l.files.layer(o.epoch)
		if err != nil {
			return nil, pr, err
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: o.epoch}, CreatedBy: "hack/image: " + l.what, Comment: "built by make image",
		}}); err != nil {
			return nil, pr, err
		}
		pr.list = append(pr.list, l.files.list()...)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, pr, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Created = v1.Time{Time: o.epoch}
	cfg.Config = imageConfig(o, revision)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, pr, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, pr, err
	}
	pr.digest = digest.String()
	imgLayers, err := img.Layers()
	if err != nil {
		return nil, pr, err
	}
	for _, l := range imgLayers {
		size, err := l.Size()
		if err != nil {
			return nil, pr, err
		}
		pr.compressed += size
	}
	sort.Slice(pr.list, func(i, j int) bool { return pr.list[i].path < pr.list[j].path })
	for _, f := range pr.list {
		if f.kind == kindFile {
			pr.files++
			pr.size += f.size
		}
	}
	return img, pr, nil
}

// imageConfig is the image's run configuration: the controller by default, as the chart runs
// it; runner Jobs run `fulfiller run`.
func imageConfig(o options, revision string) v1.Config {
	return v1.Config{
		User:       fmt.Sprintf("%d:%d", user, user),
		Entrypoint: []string{fulfillerPath},
		Cmd:        []string{"controller"},
		WorkingDir: homePath,
		Env: []string{
			"PATH=/usr/local/bin:/bin",
			"HOME=" + homePath,
			// tofu's CLI configuration for whoever runs tofu in the image, and (with the
			// runner's FULFILLER_TOFU_ENV_ prefix, which it strips) for every run's tofu.
			"TF_CLI_CONFIG_FILE=" + tofurcPath,
			"FULFILLER_TOFU_ENV_TF_CLI_CONFIG_FILE=" + tofurcPath,
			"CHECKPOINT_DISABLE=1",
		},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "fulfiller",
			"org.opencontainers.image.description": "Karpenter with the fulfiller provider: NodeClaims fulfilled by an OpenTofu module per node type",
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.revision":    revision,
			"org.opencontainers.image.source":      "https://github.com/fulfiller-sh/fulfiller",
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.created":     o.epoch.Format("2006-01-02T15:04:05Z"),
		},
	}
}
