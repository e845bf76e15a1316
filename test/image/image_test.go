// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package image tests the container image as `make image` builds it (hack/image), without a
// container engine: it builds the image twice from the same inputs and compares the digests,
// reads the OCI layout with a reader of its own, checks the configuration (user, entrypoint,
// labels) and every platform's binaries (ELF of the right machine), then unpacks the
// linux/amd64 image into a root file system and runs what the image runs inside it, chrooted
// as the image's user in a network namespace of its own with no interface up: `fulfiller
// version`, and `tofu init` of every shipped module from the image's provider mirror alone.
package image

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/terraform-config-inspect/tfconfig"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

var (
	root    string // the repository
	built   ociLayout
	version string
	images  map[string]image // by architecture
	pins    map[string]string
)

// platforms are the ones the image is built for.
var platforms = []string{"amd64", "arm64"}

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	root = filepath.Join(filepath.Dir(file), "..", "..")
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image tests:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "fulfiller-image-")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	out, err := exec.Command(filepath.Join(root, "hack", "version.sh")).Output()
	if err != nil {
		return 0, fmt.Errorf("hack/version.sh: %w", err)
	}
	version = strings.TrimSpace(string(out))
	first := filepath.Join(dir, "first")
	if err := buildImage(first); err != nil {
		return 0, err
	}
	built = ociLayout(filepath.Join(first, "oci"))
	if images, err = readImages(built); err != nil {
		return 0, err
	}
	// A second build from the same inputs, for TestReproducible.
	if err := buildImage(filepath.Join(dir, "second")); err != nil {
		return 0, err
	}
	if pins, err = shippedPins(); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// buildImage runs the image builder as make image does.
func buildImage(out string) error {
	tools, err := testenv.Tool("tofu")
	if err != nil {
		return err
	}
	epoch, err := exec.Command("git", "-C", root, "log", "-1", "--format=%ct").Output()
	if err != nil {
		return fmt.Errorf("git log: %w", err)
	}
	cmd := exec.Command("go", "-C", filepath.Join(root, "hack", "image"), "run", ".",
		"-root", root, "-out", out, "-tools", filepath.Dir(filepath.Dir(tools)), "-version", version,
		"-platforms", "linux/"+strings.Join(platforms, ",linux/"))
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strings.TrimSpace(string(epoch)))
	if outb, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the image (make image-tools builds what it needs for arm64): %w\n%s", err, outb)
	}
	return nil
}

func readImages(l ociLayout) (map[string]image, error) {
	top, err := l.top()
	if err != nil {
		return nil, err
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		return nil, fmt.Errorf("index.json names %+v, want one image index", top.Manifests)
	}
	var idx index
	if err := l.json(top.Manifests[0], &idx); err != nil {
		return nil, err
	}
	out := map[string]image{}
	for _, d := range idx.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || d.MediaType != "application/vnd.oci.image.manifest.v1+json" {
			return nil, fmt.Errorf("index entry %+v is no linux OCI image", d)
		}
		img := image{desc: d}
		if err := l.json(d, &img.manifest); err != nil {
			return nil, err
		}
		if err := l.json(img.manifest.Config, &img.config); err != nil {
			return nil, err
		}
		out[d.Platform.Architecture] = img
	}
	return out, nil
}

// shippedPins are the provider versions the shipped modules pin, by source.
func shippedPins() (map[string]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "modules"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		info, diags := tfconfig.LoadModule(filepath.Join(root, "modules", e.Name()))
		if diags.HasErrors() {
			return nil, diags.Err()
		}
		for name, p := range info.RequiredProviders {
			if name == "terraform" && (p.Source == "" || p.Source == "terraform.io/builtin/terraform") {
				continue // tofu's own (terraform_data)
			}
			if len(p.VersionConstraints) != 1 {
				return nil, fmt.Errorf("module %s: provider %s is not pinned to one version", e.Name(), name)
			}
			out["registry.opentofu.org/"+p.Source] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(p.VersionConstraints[0]), "="))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the shipped modules pin no provider")
	}
	return out, nil
}

// TestReproducible: two builds from the same inputs are the same image, byte for byte.
func TestReproducible(t *testing.T) {
	dir := filepath.Dir(string(built))
	second := filepath.Join(filepath.Dir(dir), "second")
	a, err := os.ReadFile(filepath.Join(string(built), "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(second, "oci", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two builds of the same inputs differ:\n%s\n%s", a, b)
	}
	for _, arch := range platforms {
		for _, suffix := range []string{".tar", ".cdx.json", ".files.txt"} {
			name := fmt.Sprintf("fulfiller-%s-linux-%s%s", version, arch, suffix)
			x, errX := os.ReadFile(filepath.Join(dir, name))
			y, errY := os.ReadFile(filepath.Join(second, name))
			if errX != nil || errY != nil || !bytes.Equal(x, y) {
				t.Errorf("%s differs between two builds (%v, %v)", name, errX, errY)
			}
		}
	}
}

// TestConfig checks each platform's configuration: the user is numeric and not root, the
// entrypoint is the fulfiller with the controller as the default command, tofu's CLI
// configuration is the image's, and the labels name the version and the commit.
func TestConfig(t *testing.T) {
	revision, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(images) != len(platforms) {
		t.Fatalf("the index has %d images, want %v", len(images), platforms)
	}
	for _, arch := range platforms {
		img, ok := images[arch]
		if !ok {
			t.Fatalf("no linux/%s image", arch)
		}
		c := img.config
		if c.OS != "linux" || c.Architecture != arch {
			t.Errorf("%s: config is for %s/%s", arch, c.OS, c.Architecture)
		}
		if c.Config.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532", arch, c.Config.User)
		}
		if !slices.Equal(c.Config.Entrypoint, []string{"/usr/local/bin/fulfiller"}) || !slices.Equal(c.Config.Cmd, []string{"controller"}) {
			t.Errorf("%s: entrypoint %q cmd %q, want the fulfiller's controller", arch, c.Config.Entrypoint, c.Config.Cmd)
		}
		for _, want := range []string{"TF_CLI_CONFIG_FILE=/etc/fulfiller/tofurc", "FULFILLER_TOFU_ENV_TF_CLI_CONFIG_FILE=/etc/fulfiller/tofurc", "HOME=/home/fulfiller"} {
			if !slices.Contains(c.Config.Env, want) {
				t.Errorf("%s: env %q lacks %s", arch, c.Config.Env, want)
			}
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": strings.TrimSpace(string(revision)),
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.source":   "https://github.com/fulfiller-sh/fulfiller",
		} {
			if got := c.Config.Labels[k]; got != want {
				t.Errorf("%s: label %s = %q, want %q", arch, k, got, want)
			}
		}
	}
}

// TestFiles unpacks every platform's image and checks what it holds: nothing but the files
// docs/image.md lists, every binary an ELF of the platform's machine, and a provider in the
// mirror for every version a shipped module pins.
func TestFiles(t *testing.T) {
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, arch := range platforms {
		t.Run(arch, func(t *testing.T) {
			rootfs := t.TempDir()
			files, err := built.extract(images[arch], rootfs)
			if err != nil {
				t.Fatal(err)
			}
			binaries := []string{"/usr/local/bin/fulfiller", "/usr/local/bin/tofu"}
			for source, v := range pins {
				typ := source[strings.LastIndex(source, "/")+1:]
				binaries = append(binaries, fmt.Sprintf("/opt/tofu/providers/%s/%s/linux_%s/terraform-provider-%s_v%s", source, v, arch, typ, v))
			}
			for _, b := range binaries {
				f, err := elf.Open(filepath.Join(rootfs, b))
				if err != nil {
					t.Errorf("%s: %v (the image lacks it, or it is no ELF)", b, err)
					continue
				}
				if f.Machine != machines[arch] || f.Class != elf.ELFCLASS64 {
					t.Errorf("%s is an ELF for %s, want %s", b, f.Machine, machines[arch])
				}
				if interp := f.Section(".interp"); interp != nil {
					t.Errorf("%s is dynamically linked; the image has no libc", b)
				}
				_ = f.Close()
			}
			var paths []string
			for p := range files {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			for _, p := range paths {
				if !allowed(p) {
					t.Errorf("the image holds %s, which docs/image.md does not account for", p)
				}
			}
			for _, want := range []string{"/etc/passwd", "/etc/group", "/etc/ssl/certs/ca-certificates.crt", "/etc/fulfiller/tofurc", "/usr/share/licenses/fulfiller/LICENSE"} {
				if _, ok := files[want]; !ok {
					t.Errorf("the image lacks %s", want)
				}
			}
			if info, err := os.Stat(filepath.Join(rootfs, "tmp")); err != nil || info.Mode()&os.ModeSticky == 0 || info.Mode().Perm() != 0o777 {
				t.Errorf("/tmp: %v, %v; want a sticky 1777 folder", info, err)
			}
			if info, err := os.Stat(filepath.Join(rootfs, "home", "fulfiller")); err != nil || info.Sys().(*syscall.Stat_t).Uid != 65532 {
				t.Errorf("/home/fulfiller must belong to 65532: %v", err)
			}
		})
	}
}

// allowed is what the image may hold (docs/image.md says why each is there).
func allowed(p string) bool {
	for _, prefix := range []string{"/modules/", "/opt/tofu/providers/", "/usr/share/licenses/"} {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	switch p {
	case "/usr/local/bin/fulfiller", "/usr/local/bin/tofu", "/etc/passwd", "/etc/group",
		"/etc/ssl/certs/ca-certificates.crt", "/etc/fulfiller/tofurc":
		return true
	}
	return false
}

// rootfs unpacks the linux/amd64 image into a fresh folder and gives it what a container
// runtime would: /dev/null, /dev/zero, /dev/urandom and /proc. It is for this machine's
// architecture, whose binaries run here.
func rootfs(t *testing.T) string {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Fatalf("the image's run tests run the linux/amd64 image, on amd64")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("running the image needs root (chroot, namespaces); CI runs as root")
		}
		t.Skip("running the image needs root (chroot, namespaces)")
	}
	dir := t.TempDir()
	if _, err := built.extract(images["amd64"], dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, minor := range map[string]int{"null": 3, "zero": 5, "urandom": 9} {
		p := filepath.Join(dir, "dev", name)
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|minor); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	proc := filepath.Join(dir, "proc")
	if err := os.MkdirAll(proc, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("proc", proc, "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(proc, syscall.MNT_DETACH) })
	return dir
}

// inImage runs a program of the image chrooted in rootfs, as the image's user with its
// environment, in working folder dir, in a network namespace of its own (only a loopback
// interface, down: no network at all) and a mount namespace of its own.
func inImage(rootfs, dir string, env []string, name string, args ...string) (string, error) {
	cmd := imageCmd(rootfs, dir, env, name, args...)
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// imageCmd is a program of the image chrooted in rootfs, as the image's user with its
// environment, in working folder dir and a mount namespace of its own; its network is the
// one it is started in.
func imageCmd(rootfs, dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(slices.Clone(images["amd64"].config.Config.Env), env...)
	uid, gid := imageUser()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     rootfs,
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}},
		Cloneflags: syscall.CLONE_NEWNS,
	}
	return cmd
}

func imageUser() (uint32, uint32) {
	u, g, _ := strings.Cut(images["amd64"].config.Config.User, ":")
	uid, _ := strconv.Atoi(u)
	gid, _ := strconv.Atoi(g)
	return uint32(uid), uint32(gid)
}

// TestVersionInImage: `fulfiller version` in the image names this build, the Karpenter core
// of go.mod, the image's tofu and every provider a shipped module pins, in the mirror.
func TestVersionInImage(t *testing.T) {
	fs := rootfs(t)
	out, err := inImage(fs, "/", nil, "/usr/local/bin/fulfiller", "version", "-json")
	if err != nil {
		t.Fatalf("fulfiller version: %v\n%s", err, out)
	}
	var v struct {
		Fulfiller, Karpenter, Tofu, TofuPath, TofuError, ProvidersError string
		Providers                                                       []tfrunner.MirroredProvider
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("fulfiller version -json: %v\n%s", err, out)
	}
	if v.Fulfiller != version || v.Karpenter != "v1.15.0" || v.Tofu != "1.12.6" || v.TofuPath != "/usr/local/bin/tofu" || v.TofuError != "" || v.ProvidersError != "" {
		t.Errorf("fulfiller version in the image: %s", out)
	}
	got := map[string]string{}
	for _, p := range v.Providers {
		if p.Mirror != "/opt/tofu/providers" || p.Platform != "linux_amd64" {
			t.Errorf("provider %+v: want it in /opt/tofu/providers for linux_amd64", p)
		}
		got[p.Source] = p.Version
	}
	for source, want := range pins {
		if got[source] != want {
			t.Errorf("the image's mirror has %s %q, a shipped module pins %s", source, got[source], want)
		}
	}
}

// TestInitOffline runs `tofu init` of every shipped module in the image, as a runner does
// (a copy in a writable folder), without any network: the mirror alone serves every
// provider. A module needing a provider the mirror lacks fails, naming the mirror.
func TestInitOffline(t *testing.T) {
	fs := rootfs(t)
	entries, err := os.ReadDir(filepath.Join(fs, "modules"))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := imageUser()
	inited := 0
	for _, e := range entries {
		work := filepath.Join("/tmp", "init-"+e.Name())
		if out, err := exec.Command("cp", "-r", filepath.Join(fs, "modules", e.Name()), filepath.Join(fs, work)).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if err := chownTree(filepath.Join(fs, work), int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
		out, err := inImage(fs, work, nil, "/usr/local/bin/tofu", "init", "-input=false", "-backend=false", "-no-color")
		if err != nil {
			t.Errorf("tofu init of module %s in the image, offline: %v\n%s", e.Name(), err, out)
			continue
		}
		inited++
	}
	if inited == 0 {
		t.Fatal("the image has no module")
	}

	missing := filepath.Join(fs, "tmp", "needs-provider")
	if err := os.MkdirAll(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(missing, "main.tf"), []byte(`terraform {
  required_providers {
    absent = { source = "example/absent", version = "1.0.0" }
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := chownTree(missing, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	out, err := inImage(fs, "/tmp/needs-provider", nil, "/usr/local/bin/tofu", "init", "-input=false", "-backend=false", "-no-color")
	if err == nil || !strings.Contains(out, "/opt/tofu/providers") {
		t.Errorf("tofu init of a module needing a provider the mirror lacks: %v, want a failure naming /opt/tofu/providers:\n%s", err, out)
	}
}

// TestGitSourceInImage: the image has no git, so a git module source is refused before tofu
// starts, saying so and what to use instead (docs/image.md); an OCI, registry or HTTP(S)
// source needs no program beyond tofu.
func TestGitSourceInImage(t *testing.T) {
	fs := rootfs(t)
	if _, err := os.Lstat(filepath.Join(fs, "usr", "bin", "git")); !os.IsNotExist(err) {
		t.Fatalf("the image has /usr/bin/git (%v): this test and docs/image.md assume it has none", err)
	}
	source := "git::https://git.example.com/org/node.git//node?ref=v1"
	out, err := inImage(fs, "/tmp", nil, "/usr/local/bin/fulfiller", "module", "check", source)
	if err == nil || !strings.Contains(out, "no git is on the PATH") || !strings.Contains(out, "use an OCI, module registry or HTTP(S) archive source") {
		t.Errorf("fulfiller module check %s in the image: %v, want a refusal naming the missing git:\n%s", source, err, out)
	}
}

func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
