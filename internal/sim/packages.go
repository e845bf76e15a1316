// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The machine's software. A machine boots from an image: ImageNode has the node software
// (containerd, runc, kubelet, kubeadm, kubectl of KubeletVersion, configured as
// bootstrap's install.sh leaves them: what images/ bakes into an image); ImageStock is a stock
// Ubuntu 24.04 cloud image with curl, gpg and the CA certificates, and nothing of
// Kubernetes. A program of the machine's is a file on its disk, in a PATH folder, that says
// which program of which version it is; a command that is no file there is not found (exit
// 127), as on a real machine. The package tools put them there: apt-get installs the
// Kubernetes packages from the community repository a sources list names (after apt-get
// update), curl downloads containerd's and runc's releases and the repository's key from
// the simulated internet (pkgs.k8s.io, github.com, raw.githubusercontent.com), tar unpacks
// containerd's release, install copies runc; gpg, sha256sum, systemctl, dpkg, apt-cache and
// apt-mark do what install.sh needs of them. Each package operation (an apt-get update or
// install, a download) takes MachineConfig.PackageDelay, and MachineConfig.PackageFault
// makes chosen commands fail like their real counterparts, always or the first few times.

// Images a machine boots from.
const (
	ImageNode  = "node"
	ImageStock = "stock"
)

// Versions of the software on a node image and in the simulated releases.
const (
	ContainerdVersion = "2.1.4"
	RuncVersion       = "1.3.0"
	// newestPatch is the newest patch release the simulated community repository has of
	// every minor.
	newestPatch = 9
)

// PackageFault makes some commands of the machine fail as their real counterparts do: a
// mirror that answers 503, a release that is gone, a kubeadm that refuses.
type PackageFault struct {
	// Command names the commands that fail: the program's name, then words each of which
	// must be in one of its arguments ("apt-get install", "curl containerd-2.1.4",
	// "kubeadm join").
	Command string `json:"command"`
	// Times is how often it fails before it succeeds (a transient failure a retry gets past);
	// 0: every time.
	Times int `json:"times,omitempty"`
	// Message is the failing command's last line; empty: what the real program would say.
	Message string `json:"message,omitempty"`
}

// matches says whether the command args (program name first) is one the fault names.
func (f *PackageFault) matches(args []string) bool {
	words := strings.Fields(f.Command)
	if len(words) == 0 || path.Base(args[0]) != words[0] {
		return false
	}
	for _, w := range words[1:] {
		if !slices.ContainsFunc(args[1:], func(a string) bool { return strings.Contains(a, w) }) {
			return false
		}
	}
	return true
}

// programDirs are the machine's PATH.
var programDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// programMagic starts every program file on a simulated disk.
const programMagic = "#!fulfiller-sim program "

// installProgram puts program name of version at p on the disk.
func (d disk) installProgram(p, name, version string) error {
	target := d.real(p, "/")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	return os.WriteFile(target, []byte(programMagic+name+" "+version+"\n"), 0o755)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// hasProgram says whether the disk has the program on its PATH.
func (d disk) hasProgram(name string) bool {
	v, _ := d.program(name)
	return v != ""
}

// program finds a program on the disk's PATH; version is "" when it is not there.
func (d disk) program(name string) (version, where string) {
	for _, dir := range programDirs {
		p := path.Join(dir, name)
		data, err := os.ReadFile(d.real(p, "/"))
		if err != nil {
			continue
		}
		rest, ok := strings.CutPrefix(string(data), programMagic+name+" ")
		if ok {
			return strings.TrimSpace(rest), p
		}
	}
	return "", ""
}

// osReleases are /etc/os-release of the images' operating systems (MachineConfig.OS); the
// default is Ubuntu 24.04. debian-13 and rocky-9 are ones install.sh does not support.
var osReleases = map[string]string{
	"ubuntu-24.04": "PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n",
	"ubuntu-22.04": "PRETTY_NAME=\"Ubuntu 22.04.5 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n",
	"debian-12":    "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=debian\n",
	"debian-13":    "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"13\"\nVERSION_CODENAME=trixie\nID=debian\n",
	"rocky-9":      "PRETTY_NAME=\"Rocky Linux 9.4 (Blue Onyx)\"\nNAME=\"Rocky Linux\"\nVERSION_ID=\"9.4\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n",
}

// fstab of the images: a swap file, which install.sh turns off for good.
const fstab = "LABEL=cloudimg-rootfs / ext4 discard,commit=30,errors=remount-ro 0 1\n/swap.img none swap sw 0 0\n"

// installImage puts an image's software, of operating system os, on a fresh disk.
func (d disk) installImage(image, system string) error {
	release, ok := osReleases[cmpOr(system, "ubuntu-24.04")]
	if !ok {
		return fmt.Errorf("unknown operating system %q", system)
	}
	files := map[string]string{
		"/etc/os-release":                    release,
		"/etc/fstab":                         fstab,
		"/etc/ssl/certs/ca-certificates.crt": "-----BEGIN CERTIFICATE-----\nsimulated CA bundle\n-----END CERTIFICATE-----\n",
	}
	programs := map[string][2]string{
		"/usr/bin/curl": {"curl", "8.5.0"},
		"/usr/bin/gpg":  {"gpg", "2.4.4"},
	}
	switch image {
	case "", ImageNode:
		for p, v := range map[string][2]string{
			"/usr/bin/kubelet":                       {"kubelet", KubeletVersion},
			"/usr/bin/kubeadm":                       {"kubeadm", KubeletVersion},
			"/usr/bin/kubectl":                       {"kubectl", KubeletVersion},
			"/usr/bin/crictl":                        {"crictl", "v1.36.0"},
			"/usr/local/bin/containerd":              {"containerd", ContainerdVersion},
			"/usr/local/bin/containerd-shim-runc-v2": {"containerd-shim-runc-v2", ContainerdVersion},
			"/usr/local/bin/ctr":                     {"ctr", ContainerdVersion},
			"/usr/local/sbin/runc":                   {"runc", RuncVersion},
			"/opt/cni/bin/bridge":                    {"bridge", "1.6.0"},
			"/opt/cni/bin/host-local":                {"host-local", "1.6.0"},
			"/opt/cni/bin/loopback":                  {"loopback", "1.6.0"},
		} {
			programs[p] = v
		}
		files["/usr/local/lib/systemd/system/containerd.service"] = containerdUnit
		files["/etc/containerd/config.toml"] = strings.NewReplacer("SystemdCgroup = false", "SystemdCgroup = true",
			"sandbox = 'registry.k8s.io/pause:3.10'", "sandbox = 'registry.k8s.io/pause:3.10.2'").Replace(containerdDefaultConfig)
		files["/etc/modules-load.d/kubernetes.conf"] = "overlay\nbr_netfilter\n"
		files["/etc/sysctl.d/99-kubernetes.conf"] = "net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n"
		files["/etc/fstab"] = strings.Replace(fstab, "/swap.img", "#/swap.img", 1)
		minor := KubeletVersion[1:strings.LastIndex(KubeletVersion, ".")]
		keyring := "/etc/apt/keyrings/kubernetes-v" + minor + ".gpg"
		files[keyring] = "fulfiller-sim keyring\n" + releaseKey
		files["/etc/apt/sources.list.d/kubernetes.list"] = "deb [signed-by=" + keyring + "] https://pkgs.k8s.io/core:/stable:/v" + minor + "/deb/ /\n"
		files[updatedMarker(minor)] = "Package: kubeadm\n"
	case ImageStock:
	default:
		return fmt.Errorf("unknown image %q (%s or %s)", image, ImageNode, ImageStock)
	}
	for p, content := range files {
		target := d.real(p, "/")
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(target); err == nil {
			continue // a disk that booted before keeps what is on it
		}
		if err := os.WriteFile(target, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for p, prog := range programs {
		if _, err := os.Stat(d.real(p, "/")); err == nil {
			continue
		}
		if err := d.installProgram(p, prog[0], prog[1]); err != nil {
			return err
		}
	}
	return nil
}

// packageOperation is one slow operation of the package tools: it takes the machine's
// PackageDelay, or fails with its PackageFault. It reports false when the command fails;
// the failure's message is then written.
func (c *command) packageOperation(defaultMessage string, status uint8) (uint8, bool) {
	c.sh.m.faultsMu.Lock()
	c.sh.m.packageOps++
	c.sh.m.faultsMu.Unlock()
	if !sleep(c.ctx, c.sh.m.cfg.PackageDelay) {
		return curlTimeout, false
	}
	return c.fault(defaultMessage, status)
}

// fault applies the machine's PackageFault to this command: it reports false, after writing
// the failure's message, when the command is to fail now.
func (c *command) fault(defaultMessage string, status uint8) (uint8, bool) {
	f := c.sh.m.cfg.PackageFault
	if f == nil || !f.matches(append([]string{c.name}, c.args...)) {
		return 0, true
	}
	c.sh.m.faultsMu.Lock()
	c.sh.m.faults++
	n := c.sh.m.faults
	c.sh.m.faultsMu.Unlock()
	if f.Times > 0 && n > f.Times {
		return 0, true
	}
	msg := f.Message
	if msg == "" {
		msg = defaultMessage
	}
	if msg != "" {
		fmt.Fprintln(c.hc.Stderr, msg)
	}
	return status, false
}

// repository is a Kubernetes community package repository a sources list names.
type repository struct {
	minor   string // "1.36"
	keyring string
}

var kubernetesRepo = regexp.MustCompile(`^deb \[signed-by=(\S+)\] https://pkgs\.k8s\.io/core:/stable:/v([0-9]+\.[0-9]+)/deb/ /$`)

// repositories reads the Kubernetes repositories of /etc/apt/sources.list.d.
func (c *command) repositories() ([]repository, error) {
	entries, err := os.ReadDir(c.path("/etc/apt/sources.list.d"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var repos []repository
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".list") {
			continue
		}
		data, err := os.ReadFile(c.path("/etc/apt/sources.list.d/" + e.Name()))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if m := kubernetesRepo.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				repos = append(repos, repository{minor: m[2], keyring: m[1]})
			}
		}
	}
	return repos, nil
}

// updatedMarker is what apt-get update leaves for a repository (its package lists).
func updatedMarker(minor string) string {
	return "/var/lib/apt/lists/pkgs.k8s.io_core:_stable:_v" + minor + "_deb_Packages"
}

// kubernetesPackages are the community repository's packages and the programs each puts on
// the disk (with the packages it depends on: cri-tools, kubernetes-cni).
var kubernetesPackages = map[string][][2]string{
	"kubelet": {{"/usr/bin/kubelet", "kubelet"}, {"/opt/cni/bin/bridge", "bridge"}, {"/opt/cni/bin/host-local", "host-local"}, {"/opt/cni/bin/loopback", "loopback"}},
	"kubeadm": {{"/usr/bin/kubeadm", "kubeadm"}, {"/usr/bin/crictl", "crictl"}},
	"kubectl": {{"/usr/bin/kubectl", "kubectl"}},
}

// basePackages are the distribution's packages install.sh may install.
var basePackages = map[string][2]string{
	"curl":            {"/usr/bin/curl", "8.5.0"},
	"gpg":             {"/usr/bin/gpg", "2.4.4"},
	"ca-certificates": {"", ""},
}

// available lists the versions (1.36.0-1.1 ...) the updated repositories have of a package.
func (c *command) available(pkg string) ([]string, error) {
	if _, ok := kubernetesPackages[pkg]; !ok {
		return nil, nil
	}
	repos, err := c.repositories()
	if err != nil {
		return nil, err
	}
	var versions []string
	for _, r := range repos {
		if _, err := os.Stat(c.path(updatedMarker(r.minor))); err != nil {
			continue // apt-get update has not read it
		}
		for p := newestPatch; p >= 0; p-- {
			versions = append(versions, fmt.Sprintf("%s.%d-1.1", r.minor, p))
		}
	}
	return versions, nil
}

// aptGet: apt-get [-q] [-y] [-o opt=value]... [--no-install-recommends] [--allow-*]
// update|install PKG[=VERSION]...
func (c *command) aptGet() uint8 {
	var words []string
	for i := 0; i < len(c.args); i++ {
		switch a := c.args[i]; {
		case a == "-o":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			words = append(words, a)
		}
	}
	if len(words) == 0 {
		return c.errorf(100, "E: no operation given")
	}
	switch words[0] {
	case "update":
		if status, ok := c.packageOperation("E: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/noble/InRelease  503  Service Unavailable [IP: 91.189.91.82 80]", 100); !ok {
			return status
		}
		fmt.Fprintln(c.hc.Stdout, "Hit:1 http://archive.ubuntu.com/ubuntu noble InRelease")
		repos, err := c.repositories()
		if err != nil {
			return c.errorf(100, "E: %v", err)
		}
		for i, r := range repos {
			if _, err := os.Stat(c.path(r.keyring)); err != nil {
				fmt.Fprintf(c.hc.Stderr, "W: GPG error: https://pkgs.k8s.io/core:/stable:/v%s/deb  InRelease: The following signatures couldn't be verified because the public key is not available\n", r.minor)
				return c.errorf(100, "E: The repository 'https://pkgs.k8s.io/core:/stable:/v%s/deb  InRelease' is not signed.", r.minor)
			}
			fmt.Fprintf(c.hc.Stdout, "Get:%d https://pkgs.k8s.io/core:/stable:/v%s/deb  InRelease [1186 B]\n", i+2, r.minor)
			if err := os.MkdirAll(filepath.Dir(c.path(updatedMarker(r.minor))), 0o755); err != nil {
				return c.errorf(100, "E: %v", err)
			}
			if err := os.WriteFile(c.path(updatedMarker(r.minor)), []byte("Package: kubeadm\n"), 0o644); err != nil {
				return c.errorf(100, "E: %v", err)
			}
		}
		fmt.Fprintln(c.hc.Stdout, "Reading package lists... Done")
		return 0
	case "install":
		if len(words) < 2 {
			return c.errorf(100, "E: no packages to install")
		}
		type install struct{ pkg, version string }
		var todo []install
		for _, w := range words[1:] {
			pkg, version, _ := strings.Cut(w, "=")
			if spec, ok := basePackages[pkg]; ok {
				todo = append(todo, install{pkg, spec[1]})
				continue
			}
			versions, err := c.available(pkg)
			if err != nil {
				return c.errorf(100, "E: %v", err)
			}
			if len(versions) == 0 {
				return c.errorf(100, "E: Unable to locate package %s", pkg)
			}
			if version == "" {
				version = versions[0]
			}
			if !slices.Contains(versions, version) {
				return c.errorf(100, "E: Version '%s' for '%s' was not found", version, pkg)
			}
			todo = append(todo, install{pkg, version})
		}
		if status, ok := c.packageOperation("E: Failed to fetch https://pkgs.k8s.io/core:/stable:/v1.36/deb/amd64/kubelet_1.36.3-1.1_amd64.deb  503  Service Unavailable [IP: 146.75.53.55 443]", 100); !ok {
			return status
		}
		for _, in := range todo {
			version := "v" + strings.SplitN(in.version, "-", 2)[0]
			for _, prog := range kubernetesPackages[in.pkg] {
				if err := c.sh.disk.installProgram(prog[0], prog[1], version); err != nil {
					return c.errorf(100, "E: %v", err)
				}
			}
			if spec, ok := basePackages[in.pkg]; ok && spec[0] != "" {
				if err := c.sh.disk.installProgram(spec[0], in.pkg, spec[1]); err != nil {
					return c.errorf(100, "E: %v", err)
				}
			}
			fmt.Fprintf(c.hc.Stdout, "Setting up %s (%s) ...\n", in.pkg, in.version)
		}
		return 0
	}
	return c.errorf(100, "E: Invalid operation %s", words[0])
}

// aptCache: apt-cache madison PKG.
func (c *command) aptCache() uint8 {
	if len(c.args) != 2 || c.args[0] != "madison" {
		return c.errorf(100, "E: the simulated apt-cache only runs madison PKG")
	}
	versions, err := c.available(c.args[1])
	if err != nil {
		return c.errorf(100, "E: %v", err)
	}
	for _, v := range versions {
		minor := v[:strings.LastIndex(v[:strings.Index(v, "-")], ".")]
		fmt.Fprintf(c.hc.Stdout, "   %s | %s | https://pkgs.k8s.io/core:/stable:/v%s/deb  Packages\n", c.args[1], v, minor)
	}
	return 0
}

// dpkg: dpkg --print-architecture.
func (c *command) dpkg() uint8 {
	if len(c.args) != 1 || c.args[0] != "--print-architecture" {
		return c.errorf(2, "the simulated dpkg only prints its architecture")
	}
	fmt.Fprintln(c.hc.Stdout, c.sh.m.cfg.arch())
	return 0
}

// gpg: gpg [--batch] [--yes] --dearmor -o OUT IN.
func (c *command) gpg() uint8 {
	var out, in string
	dearmor := false
	for i := 0; i < len(c.args); i++ {
		switch a := c.args[i]; a {
		case "--batch", "--yes":
		case "--version":
			fmt.Fprintln(c.hc.Stdout, "gpg (GnuPG) 2.4.4")
			return 0
		case "--dearmor":
			dearmor = true
		case "-o", "--output":
			if i+1 < len(c.args) {
				out = c.args[i+1]
				i++
			}
		default:
			in = a
		}
	}
	if !dearmor || out == "" || in == "" {
		return c.errorf(2, "the simulated gpg only runs --dearmor -o OUT IN")
	}
	data, err := os.ReadFile(c.path(in))
	if err != nil {
		return c.errorf(2, "can't open '%s': %v", in, unwrapPath(err))
	}
	if !bytes.HasPrefix(data, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")) {
		return c.errorf(2, "no valid OpenPGP data found.")
	}
	if err := os.WriteFile(c.path(out), append([]byte("fulfiller-sim keyring\n"), data...), 0o644); err != nil {
		return c.errorf(2, "can't create '%s': %v", out, unwrapPath(err))
	}
	return 0
}

// sha256sum: sha256sum FILE..., the real digests of the disk's files.
func (c *command) sha256sum() uint8 {
	var status uint8
	for _, f := range c.args {
		data, err := os.ReadFile(c.path(f))
		if err != nil {
			status = c.errorf(1, "%s: %v", f, unwrapPath(err))
			continue
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(c.hc.Stdout, "%s  %s\n", hex.EncodeToString(sum[:]), f)
	}
	return status
}

// containerdTarball is the content of the simulated containerd release.
func containerdTarball(version, arch string) string {
	return "fulfiller-sim release containerd " + version + " linux-" + arch + "\n"
}

// tar: tar -C DIR -xzf FILE, of a simulated containerd release.
func (c *command) tar() uint8 {
	dir, file := "", ""
	for i := 0; i < len(c.args); i++ {
		switch a := c.args[i]; {
		case a == "-C" && i+1 < len(c.args):
			dir = c.args[i+1]
			i++
		case a == "-xzf" && i+1 < len(c.args):
			file = c.args[i+1]
			i++
		default:
			return c.errorf(2, "option %s is not simulated (tar -C DIR -xzf FILE)", a)
		}
	}
	data, err := os.ReadFile(c.path(file))
	if err != nil {
		return c.errorf(2, "%s: Cannot open: %v", file, unwrapPath(err))
	}
	var version, arch string
	if _, err := fmt.Sscanf(string(data), "fulfiller-sim release containerd %s linux-%s", &version, &arch); err != nil {
		fmt.Fprintln(c.hc.Stderr, "gzip: stdin: not in gzip format")
		return c.errorf(2, "Child returned status 1")
	}
	if arch != c.sh.m.cfg.arch() {
		return c.errorf(2, "%s is for %s; this machine is %s", file, arch, c.sh.m.cfg.arch())
	}
	for _, prog := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if err := c.sh.disk.installProgram(path.Join(abs(dir, c.hc.Dir), "bin", prog), prog, version); err != nil {
			return c.errorf(2, "%v", err)
		}
	}
	return 0
}

// install: install [-D] [-m MODE] SRC DST.
func (c *command) install() uint8 {
	mode := os.FileMode(0o755)
	var paths []string
	for i := 0; i < len(c.args); i++ {
		switch a := c.args[i]; {
		case a == "-D":
		case a == "-m" && i+1 < len(c.args):
			m, err := strconv.ParseUint(c.args[i+1], 8, 32)
			if err != nil {
				return c.errorf(1, "invalid mode %q", c.args[i+1])
			}
			mode = os.FileMode(m)
			i++
		default:
			paths = append(paths, a)
		}
	}
	if len(paths) != 2 {
		return c.errorf(1, "the simulated install copies one file: install [-D] [-m MODE] SRC DST")
	}
	data, err := os.ReadFile(c.path(paths[0]))
	if err != nil {
		return c.errorf(1, "cannot stat '%s': %v", paths[0], unwrapPath(err))
	}
	dst := c.path(paths[1])
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return c.errorf(1, "%v", err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		return c.errorf(1, "cannot create regular file '%s': %v", paths[1], unwrapPath(err))
	}
	if err := os.Chmod(dst, mode); err != nil {
		return c.errorf(1, "%v", err)
	}
	return 0
}

// unitsState is where the simulated systemd keeps which units are enabled and active.
const unitsState = "/run/fulfiller-sim-systemd"

// units are the services the simulated systemd knows: the program each runs and where its
// unit file is.
var units = map[string][2]string{
	"containerd": {"containerd", "/usr/local/lib/systemd/system/containerd.service"},
	"kubelet":    {"kubelet", ""},
}

// systemctl: daemon-reload, enable/start/restart UNIT..., is-active UNIT.
func (c *command) systemctl() uint8 {
	if len(c.args) == 0 {
		return c.errorf(1, "too few arguments")
	}
	verb, names := c.args[0], c.args[1:]
	if verb == "daemon-reload" {
		return 0
	}
	for _, n := range names {
		unit, ok := units[strings.TrimSuffix(n, ".service")]
		if !ok {
			return c.errorf(5, "Unit %s.service not found.", n)
		}
		if v, _ := c.sh.disk.program(unit[0]); v == "" {
			return c.errorf(5, "Unit %s.service not found.", n)
		}
		if unit[1] != "" {
			if _, err := os.Stat(c.path(unit[1])); err != nil {
				return c.errorf(5, "Unit %s.service not found.", n)
			}
		}
		marker := path.Join(unitsState, strings.TrimSuffix(n, ".service")+"."+map[string]string{"enable": "enabled", "start": "active", "restart": "active", "is-active": "active"}[verb])
		switch verb {
		case "enable", "start", "restart":
			if err := os.MkdirAll(c.path(unitsState), 0o755); err != nil {
				return c.errorf(1, "%v", err)
			}
			if err := os.WriteFile(c.path(marker), nil, 0o644); err != nil {
				return c.errorf(1, "%v", err)
			}
		case "is-active":
			if _, err := os.Stat(c.path(marker)); err != nil {
				fmt.Fprintln(c.hc.Stdout, "inactive")
				return 3
			}
			fmt.Fprintln(c.hc.Stdout, "active")
		default:
			return c.errorf(1, "the simulated systemctl does not %s", verb)
		}
	}
	return 0
}

// containerdUnit is containerd's systemd unit (abridged).
const containerdUnit = `[Unit]
Description=containerd container runtime
After=network.target local-fs.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always

[Install]
WantedBy=multi-user.target
`

// containerdDefaultConfig is the part of containerd 2's `containerd config default` that
// install.sh changes, in its layout.
const containerdDefaultConfig = `version = 3
root = '/var/lib/containerd'
state = '/run/containerd'

[grpc]
  address = '/run/containerd/containerd.sock'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'registry.k8s.io/pause:3.10'

  [plugins.'io.containerd.cri.v1.runtime']
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'

          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            BinaryName = ''
            Root = ''
            SystemdCgroup = false
`

// installedProgram runs a program of the node software: only when the disk has it.
// containerd, runc, kubelet, kubectl and crictl answer --version; containerd also `config
// default`; kubeadm `version -o short`, `config images list --kubernetes-version V` and join
// (c.kubeadm).
func (c *command) installedProgram() uint8 {
	version, _ := c.sh.disk.program(c.name)
	if version == "" {
		fmt.Fprintf(c.hc.Stderr, "sh: 1: %s: not found\n", c.name)
		return 127
	}
	args := strings.Join(c.args, " ")
	switch c.name {
	case "containerd":
		switch args {
		case "--version":
			fmt.Fprintf(c.hc.Stdout, "containerd github.com/containerd/containerd/v2 v%s fulfiller-sim\n", version)
			return 0
		case "config default":
			_, _ = io.WriteString(c.hc.Stdout, containerdDefaultConfig)
			return 0
		}
	case "runc":
		if args == "--version" {
			fmt.Fprintf(c.hc.Stdout, "runc version %s\ncommit: fulfiller-sim\nspec: 1.2.1\n", version)
			return 0
		}
	case "kubelet":
		if args == "--version" {
			fmt.Fprintf(c.hc.Stdout, "Kubernetes %s\n", version)
			return 0
		}
	case "kubectl":
		if args == "version --client" {
			fmt.Fprintf(c.hc.Stdout, "Client Version: %s\nKustomize Version: v5.7.1\n", version)
			return 0
		}
	case "crictl":
		if args == "--version" {
			fmt.Fprintf(c.hc.Stdout, "crictl version %s\n", version)
			return 0
		}
	case "kubeadm":
		switch {
		case args == "version -o short":
			fmt.Fprintln(c.hc.Stdout, version)
			return 0
		case strings.HasPrefix(args, "config images list --kubernetes-version "):
			v := strings.TrimPrefix(args, "config images list --kubernetes-version ")
			for _, image := range []string{"kube-apiserver:" + v, "kube-controller-manager:" + v, "kube-scheduler:" + v, "kube-proxy:" + v,
				"coredns/coredns:v1.12.1", "pause:3.10.2", "etcd:3.6.5-0"} {
				fmt.Fprintln(c.hc.Stdout, "registry.k8s.io/"+image)
			}
			return 0
		}
		return c.kubeadm()
	}
	return c.errorf(1, "%s %s is not simulated", c.name, args)
}

// tr: tr -d SET or tr -cd SET, of character ranges like '\040-\176'.
func (c *command) tr() uint8 {
	if len(c.args) != 2 || (c.args[0] != "-d" && c.args[0] != "-cd") {
		return c.errorf(1, "the simulated tr only deletes (-d, -cd) a set")
	}
	set, err := parseTrSet(c.args[1])
	if err != nil {
		return c.errorf(1, "%v", err)
	}
	in, _ := io.ReadAll(c.hc.Stdin)
	complement := c.args[0] == "-cd"
	out := in[:0:0]
	for _, b := range in {
		if set[b] == complement {
			out = append(out, b)
		}
	}
	_, _ = c.hc.Stdout.Write(out)
	return 0
}

// parseTrSet reads a tr set of characters, octal escapes and ranges.
func parseTrSet(s string) ([256]bool, error) {
	var set [256]bool
	var chars []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			n, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
			if err != nil {
				return set, fmt.Errorf("bad escape in %q", s)
			}
			chars = append(chars, byte(n))
			i += 3
			continue
		}
		chars = append(chars, s[i])
	}
	for i := 0; i < len(chars); i++ {
		if i+2 < len(chars) && chars[i+1] == '-' {
			for b := int(chars[i]); b <= int(chars[i+2]); b++ {
				set[b] = true
			}
			i += 2
			continue
		}
		set[chars[i]] = true
	}
	return set, nil
}

// cut: cut -cN-M (or -c1-M) of each line.
func (c *command) cut() uint8 {
	if len(c.args) != 1 || !strings.HasPrefix(c.args[0], "-c") {
		return c.errorf(1, "the simulated cut only cuts characters (-cN-M)")
	}
	from, to, ok := strings.Cut(strings.TrimPrefix(c.args[0], "-c"), "-")
	start, err1 := strconv.Atoi(from)
	end, err2 := strconv.Atoi(to)
	if !ok || err1 != nil || err2 != nil || start < 1 || end < start {
		return c.errorf(1, "invalid range %q", c.args[0])
	}
	in, _ := io.ReadAll(c.hc.Stdin)
	lines := strings.SplitAfter(string(in), "\n")
	for _, line := range lines {
		body, nl := strings.CutSuffix(line, "\n")
		if len(body) >= start {
			body = body[start-1 : min(end, len(body))]
		} else {
			body = ""
		}
		if nl {
			body += "\n"
		}
		_, _ = io.WriteString(c.hc.Stdout, body)
	}
	return 0
}

// sleepCommand: sleep SECONDS.
func (c *command) sleepCommand() uint8 {
	if len(c.args) != 1 {
		return c.errorf(1, "missing operand")
	}
	s, err := strconv.ParseFloat(c.args[0], 64)
	if err != nil || s < 0 {
		return c.errorf(1, "invalid time interval '%s'", c.args[0])
	}
	if !sleep(c.ctx, time.Duration(s*float64(time.Second))) {
		return 130
	}
	return 0
}
