// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-config-inspect/tfconfig"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

type kind int

const (
	kindDir kind = iota
	kindFile
)

// fileEntry is one entry of a layer: a folder, or a file with its content in memory or read
// from src.
type fileEntry struct {
	path     string // absolute, in the image
	kind     kind
	mode     int64
	uid, gid int
	size     int64
	data     []byte
	src      string
}

// tree is the content of one layer. Folders that lead to an entry are added as root's 0755
// unless the tree names them.
type tree struct {
	entries map[string]fileEntry
}

func newTree() *tree { return &tree{entries: map[string]fileEntry{}} }

func (t *tree) dir(p string, mode int64, owner int) {
	t.entries[p] = fileEntry{path: p, kind: kindDir, mode: mode, uid: owner, gid: owner}
}

func (t *tree) bytes(p string, mode int64, data []byte) {
	t.entries[p] = fileEntry{path: p, kind: kindFile, mode: mode, size: int64(len(data)), data: data}
}

// file adds the file at src (symbolic links followed) as p.
func (t *tree) file(p string, mode int64, src string) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	t.entries[p] = fileEntry{path: p, kind: kindFile, mode: mode, size: info.Size(), src: src}
	return nil
}

func single(p, src string) (*tree, error) {
	t := newTree()
	return t, t.file(p, 0o755, src)
}

// list is the tree's entries with their folders, sorted by path.
func (t *tree) list() []fileEntry {
	all := map[string]fileEntry{}
	for p, e := range t.entries {
		all[p] = e
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := t.entries[d]; !ok {
				all[d] = fileEntry{path: d, kind: kindDir, mode: 0o755}
			}
		}
	}
	out := make([]fileEntry, 0, len(all))
	for _, e := range all {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// tar writes the layer's tar stream: entries in path order, every time the epoch, numeric
// owners only, no extended attributes.
func (t *tree) tar(w io.Writer, epoch time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range t.list() {
		h := &tar.Header{
			Name:    strings.TrimPrefix(e.path, "/"),
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		if e.kind == kindDir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag = tar.TypeReg
		h.Size = e.size
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if e.src == "" {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
			continue
		}
		f, err := os.Open(e.src)
		if err != nil {
			return err
		}
		n, err := io.Copy(tw, f)
		_ = f.Close()
		if err != nil {
			return err
		}
		if n != e.size {
			return fmt.Errorf("%s changed while it was read", e.src)
		}
	}
	return tw.Close()
}

// layer is the tree as a gzipped OCI layer, compressed once here (gzip's default level, a
// header without name or time) so that the digest, the layout and the tarball share it.
func (t *tree) layer(epoch time.Time) (v1.Layer, error) {
	var compressed bytes.Buffer
	zw := gzip.NewWriter(&compressed)
	if err := t.tar(zw, epoch); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	data := compressed.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// module is a shipped module and the providers it pins.
type module struct {
	name, dir string
	providers []provider
}

// provider is a provider version a module pins.
type provider struct {
	namespace, typ, version string
}

func (p provider) source() string { return providerHost + "/" + p.namespace + "/" + p.typ }

// shippedModules reads every module under dir (a folder with configuration files) and the
// exact provider versions it requires: the image's mirror holds those, so a module must pin
// each provider to one version.
func shippedModules(dir string) ([]module, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var mods []module
	for _, e := range entries {
		if !e.IsDir() || !tfconfig.IsModuleDir(filepath.Join(dir, e.Name())) {
			continue
		}
		m := module{name: e.Name(), dir: filepath.Join(dir, e.Name())}
		info, diags := tfconfig.LoadModule(m.dir)
		if diags.HasErrors() {
			return nil, fmt.Errorf("module %s: %w", m.name, diags.Err())
		}
		for local, req := range info.RequiredProviders {
			if builtIn(local, req) {
				continue
			}
			p, err := pinned(local, req)
			if err != nil {
				return nil, fmt.Errorf("module %s: %w", m.name, err)
			}
			m.providers = append(m.providers, p)
		}
		sort.Slice(m.providers, func(i, j int) bool { return m.providers[i].source() < m.providers[j].source() })
		mods = append(mods, m)
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("no module in %s", dir)
	}
	return mods, nil
}

// builtIn is whether a required provider is tofu's own (terraform_data, terraform_remote_state),
// which is in no mirror.
func builtIn(local string, req *tfconfig.ProviderRequirement) bool {
	return local == "terraform" && (req.Source == "" || req.Source == "terraform.io/builtin/terraform")
}

func pinned(local string, req *tfconfig.ProviderRequirement) (provider, error) {
	parts := strings.Split(req.Source, "/")
	switch {
	case len(parts) == 3 && parts[0] == providerHost:
		parts = parts[1:]
	case len(parts) != 2:
		return provider{}, fmt.Errorf("provider %s: source %q: the image's mirror holds providers of %s only", local, req.Source, providerHost)
	}
	exact := ""
	if len(req.VersionConstraints) == 1 {
		exact = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(req.VersionConstraints[0]), "="))
	}
	v, err := version.NewVersion(exact)
	if err != nil {
		return provider{}, fmt.Errorf("provider %s: version constraints %q: the image's mirror needs one exact version (= X.Y.Z)", local, req.VersionConstraints)
	}
	return provider{namespace: parts[0], typ: parts[1], version: v.String()}, nil
}

// baseLayer holds what any process in the image needs: the users, the CA certificates, the
// writable folders, and the licenses of what the image ships.
func baseLayer(o options, arch, tofu string, mods []module) (*tree, error) {
	t := newTree()
	t.bytes("/etc/passwd", 0o644, []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nfulfiller:x:%d:%d:fulfiller:%s:/sbin/nologin\n", user, user, homePath)))
	t.bytes("/etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nfulfiller:x:%d:\n", user)))
	certs, err := caCertificates()
	if err != nil {
		return nil, err
	}
	t.bytes(certsPath, 0o644, certs)
	t.dir("/tmp", 0o1777, 0)
	t.dir(homePath, 0o700, user)
	if err := t.file(licensesPath+"/fulfiller/LICENSE", 0o644, filepath.Join(o.root, "LICENSE")); err != nil {
		return nil, err
	}
	// The licenses of the programs built from others' source, from the copies hack/tools.sh
	// built them in ($FULFILLER_CACHE/src/<module's last element>-<version>).
	binaries := map[string]string{tofu: toolVersion(tofu)}
	tools := o.toolsFor(arch)
	for _, p := range uniqueProviders(mods) {
		binaries[providerBinary(filepath.Join(tools, "providers"), arch, p)] = p.version
	}
	for b, ver := range binaries {
		info, err := buildinfo.ReadFile(b)
		if err != nil {
			return nil, fmt.Errorf("reading the build information of %s: %w", b, err)
		}
		name := path.Base(info.Main.Path)
		src := filepath.Join(filepath.Dir(filepath.Clean(o.tools)), "src", name+"-"+ver, "LICENSE")
		if err := t.file(licensesPath+"/"+name+"/LICENSE", 0o644, src); err != nil {
			return nil, fmt.Errorf("the license of %s %s: %w", name, ver, err)
		}
	}
	return t, nil
}

// toolVersion is the version in the name hack/tools.sh gives a tool, <tool>-<version>.
func toolVersion(p string) string {
	b := filepath.Base(p)
	return b[strings.LastIndex(b, "-")+1:]
}

// caCertificates is Mozilla's list of trusted roots as golang.org/x/crypto/x509roots/fallback
// carries it, in PEM. Roots with a constraint (a distrust-after date, which a PEM bundle
// cannot express) are left out.
func caCertificates() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n < 100 {
		return nil, fmt.Errorf("the CA bundle has %d roots only", n)
	}
	return buf.Bytes(), nil
}

func uniqueProviders(mods []module) []provider {
	seen := map[provider]bool{}
	var out []provider
	for _, m := range mods {
		for _, p := range m.providers {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].source()+out[i].version < out[j].source()+out[j].version })
	return out
}

// providerBinary is a provider's binary in hack/tools.sh's mirror (the unpacked layout).
func providerBinary(mirror, arch string, p provider) string {
	return filepath.Join(mirror, providerHost, p.namespace, p.typ, p.version, "linux_"+arch, "terraform-provider-"+p.typ+"_v"+p.version)
}

// providersLayer is the image's filesystem mirror, the unpacked layout, with every provider
// a shipped module pins, and the CLI configuration that installs from it.
func providersLayer(mirror, arch string, mods []module) (*tree, error) {
	t := newTree()
	for _, p := range uniqueProviders(mods) {
		src := providerBinary(mirror, arch, p)
		dest := path.Join(mirrorPath, providerHost, p.namespace, p.typ, p.version, "linux_"+arch, "terraform-provider-"+p.typ+"_v"+p.version)
		if err := t.file(dest, 0o755, src); err != nil {
			return nil, fmt.Errorf("provider %s %s for linux/%s (hack/tools.sh builds it; TOOLS_ARCH for another architecture): %w", p.source(), p.version, arch, err)
		}
	}
	t.bytes(tofurcPath, 0o644, tofurc)
	return t, nil
}

// modulesLayer is /modules: each shipped module's files that git tracks (so what a checkout
// holds besides, such as a local .terraform folder, stays out), executable ones 0755.
func modulesLayer(root string, mods []module) (*tree, error) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--", "modules").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the modules' files (git ls-files): %w", err)
	}
	shipped := map[string]bool{}
	for _, m := range mods {
		shipped[m.name] = true
	}
	t := newTree()
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		parts := strings.SplitN(rel, "/", 3)
		if len(parts) < 3 || !shipped[parts[1]] {
			continue
		}
		src := filepath.Join(root, filepath.FromSlash(rel))
		info, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		mode := int64(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := t.file("/"+rel, mode, src); err != nil {
			return nil, err
		}
	}
	return t, nil
}
