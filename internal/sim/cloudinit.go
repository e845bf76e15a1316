// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// The machine's cloud-init. It does what cloud-init does with #cloud-config user data, for
// the keys a node's user data uses: write_files are written onto the machine's disk, then the
// runcmd entries run as one shell script (each entry a line: a list's words quoted, a string
// as it is; no `set -e`, so a failing line does not stop the next). The script runs in a
// POSIX shell interpreter whose file system is the machine's disk and whose commands are the
// machine's: curl (which reaches the metadata service at 169.254.169.254 and nothing else),
// sed, kubeadm join, sh, rm, mkdir, cat, touch, chmod. Other commands have no effect on a
// simulated machine and count as done. Nothing is taken from the user data but what its own
// instructions produce: a provider ID the script does not fetch is not there.

// cloudConfig is the part of #cloud-config the simulated cloud-init acts on.
type cloudConfig struct {
	WriteFiles []cloudFile `json:"write_files"`
	RunCmd     []any       `json:"runcmd"`
}

type cloudFile struct {
	Path        string `json:"path"`
	Content     string `json:"content"`
	Encoding    string `json:"encoding"`
	Permissions string `json:"permissions"`
	Append      bool   `json:"append"`
}

// parseCloudConfig decodes user data as cloud-init does (gzip, base64 of gzip) and reads it
// as #cloud-config.
func parseCloudConfig(data []byte) (*cloudConfig, error) {
	data, err := bootstrap.DecodeUserData(data)
	if err != nil {
		return nil, err
	}
	if first, _, _ := bytes.Cut(data, []byte("\n")); strings.TrimSpace(string(first)) != "#cloud-config" {
		return nil, fmt.Errorf("user data is not #cloud-config (it starts %q)", truncate(string(first), 40))
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return nil, fmt.Errorf("parsing cloud-config: %w", err)
	}
	return &cc, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// disk is the machine's root file system: a folder that stands for /.
type disk struct{ root string }

// standardDirs exist on every machine's disk.
var standardDirs = []string{"/etc", "/etc/kubernetes", "/root", "/run", "/tmp", "/usr/local/bin", "/var/lib/kubelet", "/var/log"}

func newDisk(root string) (disk, error) {
	for _, d := range standardDirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return disk{}, fmt.Errorf("creating the machine's disk: %w", err)
		}
	}
	return disk{root: root}, nil
}

// abs is the machine's absolute path of p, seen from the directory cwd.
func abs(p, cwd string) string {
	if !path.IsAbs(p) {
		p = path.Join(cwd, p)
	}
	return path.Clean("/" + p)
}

// real is where the machine's path p (seen from cwd) is on the host.
func (d disk) real(p, cwd string) string {
	if p == "/dev/null" {
		return os.DevNull
	}
	return filepath.Join(d.root, filepath.FromSlash(abs(p, cwd)))
}

// writeFiles is cloud-init's write_files: parents created, content decoded, permissions set.
func (d disk) writeFiles(files []cloudFile) error {
	for _, f := range files {
		if f.Path == "" {
			return errors.New("write_files: an entry has no path")
		}
		content := []byte(f.Content)
		switch strings.ToLower(f.Encoding) {
		case "", "text/plain":
		case "b64", "base64":
			raw, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return fmt.Errorf("write_files %s: %w", f.Path, err)
			}
			content = raw
		case "gz", "gzip", "gz+b64", "gz+base64", "gzip+b64", "gzip+base64":
			raw := content
			if strings.Contains(f.Encoding, "b") {
				var err error
				if raw, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
					return fmt.Errorf("write_files %s: %w", f.Path, err)
				}
			}
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				return fmt.Errorf("write_files %s: %w", f.Path, err)
			}
			if content, err = io.ReadAll(io.LimitReader(zr, 16<<20)); err != nil {
				return fmt.Errorf("write_files %s: %w", f.Path, err)
			}
		default:
			return fmt.Errorf("write_files %s: unknown encoding %q", f.Path, f.Encoding)
		}
		perm := os.FileMode(0o644)
		if f.Permissions != "" {
			p, err := strconv.ParseUint(f.Permissions, 8, 32)
			if err != nil {
				return fmt.Errorf("write_files %s: permissions %q are not octal", f.Path, f.Permissions)
			}
			perm = os.FileMode(p)
		}
		target := d.real(f.Path, "/")
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return fmt.Errorf("write_files %s: %w", f.Path, err)
		}
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if f.Append {
			flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
		}
		out, err := os.OpenFile(target, flags, perm)
		if err != nil {
			return fmt.Errorf("write_files %s: %w", f.Path, err)
		}
		_, werr := out.Write(content)
		cerr := out.Close()
		if err := errors.Join(werr, cerr, os.Chmod(target, perm)); err != nil {
			return fmt.Errorf("write_files %s: %w", f.Path, err)
		}
	}
	return nil
}

// runcmdScript is the shell script cloud-init makes of runcmd: one line per entry, a list's
// words single-quoted, a string as it is.
func runcmdScript(entries []any) (string, error) {
	var b strings.Builder
	for _, e := range entries {
		switch v := e.(type) {
		case string:
			b.WriteString(v)
		case []any:
			words := make([]string, 0, len(v))
			for _, w := range v {
				words = append(words, shellQuote(fmt.Sprint(w)))
			}
			b.WriteString(strings.Join(words, " "))
		default:
			return "", fmt.Errorf("runcmd: entry %v is neither a string nor a list", e)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// shellQuote quotes a word for a POSIX shell: as it is when it is plain, else in single
// quotes (which may span lines), a single quote written '\”.
func shellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// runcmdPath is where cloud-init writes the runcmd script ($0 of the script).
const runcmdPath = "/var/lib/cloud/instance/scripts/runcmd"

// shell runs scripts on the machine.
type shell struct {
	m    *machine
	disk disk
	// failed lists the commands that exited non-zero ("curl: exit status 22").
	failed []string
}

// machineEnv is the environment cloud-init runs runcmd with.
var machineEnv = expand.ListEnviron("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8")

// run runs a script with the POSIX shell interpreter, in cloud-init's environment: name is
// its $0, args its $1, ....
func (sh *shell) run(ctx context.Context, script, name string, stdin io.Reader, stdout, stderr io.Writer, options, args []string) error {
	return sh.runIn(ctx, machineEnv, script, name, stdin, stdout, stderr, options, args)
}

// runIn runs a script in the environment env (what its parent exported).
func (sh *shell) runIn(ctx context.Context, env expand.Environ, script, name string, stdin io.Reader, stdout, stderr io.Writer, options, args []string) error {
	// A script must be POSIX sh, as /bin/sh (dash) reads it. The interpreter runs export and
	// readonly only as the declarations its bash variant parses them as, so the script that
	// passed as POSIX runs in that parse.
	if _, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(script), name); err != nil {
		fmt.Fprintf(stderr, "sh: %v\n", err)
		return interp.ExitStatus(2)
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), name)
	if err != nil {
		fmt.Fprintf(stderr, "sh: %v\n", err)
		return interp.ExitStatus(2)
	}
	params := append(append(append([]string{}, options...), "--"), args...)
	runner, err := interp.New(
		interp.StdIO(stdin, stdout, stderr),
		interp.Dir("/"),
		interp.Env(env),
		interp.Params(params...),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return sh.exec }),
		interp.OpenHandler(func(ctx context.Context, p string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
			return os.OpenFile(sh.disk.real(p, interp.HandlerCtx(ctx).Dir), flag, perm)
		}),
		interp.StatHandler(func(ctx context.Context, name string, follow bool) (fs.FileInfo, error) {
			p := sh.disk.real(name, interp.HandlerCtx(ctx).Dir)
			if follow {
				return os.Stat(p)
			}
			return os.Lstat(p)
		}),
		interp.ReadDirHandler2(func(ctx context.Context, p string) ([]fs.DirEntry, error) {
			return os.ReadDir(sh.disk.real(p, interp.HandlerCtx(ctx).Dir))
		}),
	)
	if err != nil {
		return fmt.Errorf("starting the shell: %w", err)
	}
	return runner.Run(ctx, file)
}

// exec runs one command of a script.
func (sh *shell) exec(ctx context.Context, args []string) error {
	hc := interp.HandlerCtx(ctx)
	name := path.Base(args[0])
	c := &command{sh: sh, ctx: ctx, hc: hc, name: name, args: args[1:]}
	var status uint8
	switch {
	case packageTools[name]:
		// A package operation applies the machine's fault itself, after its delay.
	case fromImage[name] && !sh.disk.hasProgram(name):
		fmt.Fprintf(hc.Stderr, "sh: 1: %s: not found\n", name)
		sh.failed = append(sh.failed, name+": not found")
		return interp.ExitStatus(127)
	default:
		if status, ok := c.fault(name+": simulated failure", 1); !ok {
			sh.failed = append(sh.failed, fmt.Sprintf("%s: exit status %d", name, status))
			return interp.ExitStatus(status)
		}
	}
	switch name {
	case "sh", "bash", "dash":
		status = c.shell()
	case "curl":
		status = c.curl()
	case "sed":
		status = c.sed()
	case "kubeadm", "kubelet", "kubectl", "crictl", "containerd", "runc":
		status = c.installedProgram()
	case "apt-get":
		status = c.aptGet()
	case "apt-cache":
		status = c.aptCache()
	case "apt-mark", "modprobe", "sysctl", "swapoff":
		// Nothing a simulated machine can tell.
	case "dpkg":
		status = c.dpkg()
	case "gpg":
		status = c.gpg()
	case "sha256sum":
		status = c.sha256sum()
	case "tar":
		status = c.tar()
	case "install":
		status = c.install()
	case "systemctl":
		status = c.systemctl()
	case "tr":
		status = c.tr()
	case "cut":
		status = c.cut()
	case "sleep":
		status = c.sleepCommand()
	case "rm":
		status = c.rm()
	case "mkdir":
		status = c.mkdir()
	case "cat":
		status = c.cat()
	case "touch":
		status = c.touch()
	case "chmod":
		status = c.chmod()
	default:
		sh.m.log.printf("cloud-init: %s has nothing to do on a simulated machine; treating it as done", name)
	}
	if status != 0 {
		sh.failed = append(sh.failed, fmt.Sprintf("%s: exit status %d", name, status))
		return interp.ExitStatus(status)
	}
	return nil
}

// packageTools apply the machine's PackageFault in their package operations (after
// PackageDelay); fromImage are programs of the image that a machine may lack.
var (
	packageTools = map[string]bool{"apt-get": true, "curl": true}
	fromImage    = map[string]bool{"curl": true, "gpg": true}
)

// command is one command being run.
type command struct {
	sh   *shell
	ctx  context.Context
	hc   interp.HandlerContext
	name string
	args []string
}

func (c *command) errorf(status uint8, format string, args ...any) uint8 {
	fmt.Fprintf(c.hc.Stderr, c.name+": "+format+"\n", args...)
	return status
}

func (c *command) path(p string) string { return c.sh.disk.real(p, c.hc.Dir) }

// shell: sh [-eux...] -c SCRIPT [NAME ARGS...], or sh [-eux...] FILE [ARGS...].
func (c *command) shell() uint8 {
	var options []string
	for len(c.args) > 0 && strings.HasPrefix(c.args[0], "-") && c.args[0] != "-c" {
		options = append(options, c.args[0])
		c.args = c.args[1:]
	}
	var script, name string
	var params []string
	switch {
	case len(c.args) >= 2 && c.args[0] == "-c":
		script, name, params = c.args[1], "sh", c.args[2:]
		if len(params) > 0 {
			name, params = params[0], params[1:]
		}
	case len(c.args) >= 1 && c.args[0] != "-c":
		data, err := os.ReadFile(c.path(c.args[0]))
		if err != nil {
			return c.errorf(2, "0: cannot open %s: No such file", c.args[0])
		}
		script, name, params = string(data), c.args[0], c.args[1:]
	default:
		return c.errorf(2, "the simulated machine runs sh -c SCRIPT or sh FILE")
	}
	err := c.sh.runIn(c.ctx, c.hc.Env, script, name, c.hc.Stdin, c.hc.Stdout, c.hc.Stderr, options, params)
	if status, ok := errors.AsType[interp.ExitStatus](err); ok {
		return uint8(status)
	}
	if err != nil {
		return c.errorf(2, "%v", err)
	}
	return 0
}

// kubeadm: only `kubeadm join --config FILE` (with --v and --ignore-preflight-errors).
func (c *command) kubeadm() uint8 {
	if len(c.args) == 0 || c.args[0] != "join" {
		return c.errorf(1, "the simulated machine only runs kubeadm join --config FILE")
	}
	var config string
	for i := 1; i < len(c.args); i++ {
		a := c.args[i]
		switch {
		case a == "--config" && i+1 < len(c.args):
			config = c.args[i+1]
			i++
		case strings.HasPrefix(a, "--config="):
			config = strings.TrimPrefix(a, "--config=")
		case strings.HasPrefix(a, "--v=") || strings.HasPrefix(a, "--ignore-preflight-errors"):
		default:
			return c.errorf(1, "unknown flag %q (the simulated kubeadm takes --config)", a)
		}
	}
	if config == "" {
		return c.errorf(1, "join needs --config FILE on a simulated machine")
	}
	if err := c.sh.m.kubeadmJoin(c.ctx, c.path(config)); err != nil {
		return c.errorf(1, "error execution phase: %v", err)
	}
	// What a joined machine has: the kubelet's kubeconfig (its credentials are in the
	// machine's state, kubeconfig.go).
	if err := os.WriteFile(c.path("/etc/kubernetes/kubelet.conf"), []byte("# the kubelet's kubeconfig\n"), 0o600); err != nil {
		return c.errorf(1, "writing /etc/kubernetes/kubelet.conf: %v", unwrapPath(err))
	}
	return 0
}

func (c *command) rm() uint8 {
	force, recursive := false, false
	var paths []string
	for _, a := range c.args {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			force = force || strings.Contains(a, "f")
			recursive = recursive || strings.ContainsAny(a, "rR")
			continue
		}
		paths = append(paths, a)
	}
	var status uint8
	for _, p := range paths {
		var err error
		if recursive {
			err = os.RemoveAll(c.path(p))
		} else {
			err = os.Remove(c.path(p))
		}
		if err != nil && !(force && errors.Is(err, fs.ErrNotExist)) {
			status = c.errorf(1, "cannot remove %s: %v", p, unwrapPath(err))
		}
	}
	return status
}

func (c *command) mkdir() uint8 {
	parents := false
	var status uint8
	for _, a := range c.args {
		if a == "-p" {
			parents = true
			continue
		}
		var err error
		if parents {
			err = os.MkdirAll(c.path(a), 0o755)
		} else {
			err = os.Mkdir(c.path(a), 0o755)
		}
		if err != nil {
			status = c.errorf(1, "cannot create directory %s: %v", a, unwrapPath(err))
		}
	}
	return status
}

func (c *command) cat() uint8 {
	if len(c.args) == 0 {
		if c.hc.Stdin != nil {
			_, _ = io.Copy(c.hc.Stdout, c.hc.Stdin)
		}
		return 0
	}
	var status uint8
	for _, p := range c.args {
		data, err := os.ReadFile(c.path(p))
		if err != nil {
			status = c.errorf(1, "%s: %v", p, unwrapPath(err))
			continue
		}
		_, _ = c.hc.Stdout.Write(data)
	}
	return status
}

func (c *command) touch() uint8 {
	var status uint8
	for _, p := range c.args {
		f, err := os.OpenFile(c.path(p), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			status = c.errorf(1, "cannot touch %s: %v", p, unwrapPath(err))
			continue
		}
		f.Close()
	}
	return status
}

func (c *command) chmod() uint8 {
	if len(c.args) < 2 {
		return c.errorf(1, "missing operand")
	}
	mode, err := strconv.ParseUint(c.args[0], 8, 32)
	if err != nil {
		return c.errorf(1, "the simulated chmod takes octal modes, not %q", c.args[0])
	}
	var status uint8
	for _, p := range c.args[1:] {
		if err := os.Chmod(c.path(p), os.FileMode(mode)); err != nil {
			status = c.errorf(1, "cannot change %s: %v", p, unwrapPath(err))
		}
	}
	return status
}

// unwrapPath drops the host path from a file error.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
