// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-config-inspect/tfconfig"
	"github.com/hashicorp/terraform-exec/tfexec"
)

// A run's providers, one process each for the whole tofu command.
//
// tofu starts a provider plugin afresh for each walk of one command: a `tofu apply` starts
// the hcloud provider four or five times (schemas, validation, plan, apply), and every start
// is a large binary that builds its schemas again. A run instead starts each provider once,
// before the operation, and hands it to tofu as an unmanaged provider (TF_REATTACH_PROVIDERS,
// terraform-exec's Reattach option): tofu connects to that process for every walk and leaves
// it running, and the runner stops it once tofu has exited. The process is the binary tofu
// would start (from the working directory's .terraform/providers, which `tofu init` filled and
// checked against the dependency lock file), with tofu's environment, in the module folder.
//
// A process holds one provider configuration, so a provider is shared only when the whole
// configuration (the root module and the modules `tofu init` installed) has at most one
// configuration of it: no aliases (for_each needs one), no configuration aliases passed to
// modules, no second module with a provider block of its own. tofu starts the others itself,
// as before, and so it does every provider when the runner cannot start one: the run log says
// why, and the run goes on.

// Provider plugins speak go-plugin's handshake: these are what tofu sets for them.
const (
	pluginCookieKey   = "TF_PLUGIN_MAGIC_COOKIE"
	pluginCookieValue = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2"
	pluginProtocols   = "PLUGIN_PROTOCOL_VERSIONS"
	pluginCoreVersion = "1"
)

// providerStartTimeout bounds the wait for a provider's handshake (go-plugin's own default
// is a minute; a provider that is not up by then will not be).
const providerStartTimeout = 30 * time.Second

// defaultProviderHost is where a provider source without a host comes from in OpenTofu.
const defaultProviderHost = "registry.opentofu.org"

// installedProvider is a provider plugin `tofu init` put in a working directory.
type installedProvider struct {
	addr    string // host/namespace/type, lower case
	version string
	binary  string
	problem string // why the runner cannot start it ("" when it can)
}

// shareableProviders are the providers of the working directory moduleDir (after init) that
// a run starts once for tofu, by address, and why any other installed provider is left to
// tofu.
func shareableProviders(moduleDir string) (map[string]installedProvider, []string, error) {
	installed, err := installedProviders(moduleDir)
	if err != nil || len(installed) == 0 {
		return nil, nil, err
	}
	configs, err := providerConfigs(moduleDir)
	if err != nil {
		return nil, nil, err
	}
	shared := map[string]installedProvider{}
	var notShared []string
	for _, addr := range slices.Sorted(maps.Keys(installed)) {
		p := installed[addr]
		switch {
		case p.problem != "":
			notShared = append(notShared, addr+": "+p.problem)
		case configs[addr] != "":
			notShared = append(notShared, addr+": "+configs[addr])
		default:
			shared[addr] = p
		}
	}
	return shared, notShared, nil
}

// installedProviders reads .terraform/providers/<host>/<namespace>/<type>/<version>/<os>_<arch>/
// of a working directory. A provider with more than one version there, or without exactly one
// executable terraform-provider-<type>*, has a problem instead of a binary.
func installedProviders(moduleDir string) (map[string]installedProvider, error) {
	root := filepath.Join(moduleDir, dataDir, "providers")
	platform := runtime.GOOS + "_" + runtime.GOARCH
	dirs, err := filepath.Glob(filepath.Join(root, "*", "*", "*", "*", platform))
	if err != nil {
		return nil, err
	}
	out := map[string]installedProvider{}
	for _, dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		addr, version, typ := strings.ToLower(strings.Join(parts[:3], "/")), parts[3], parts[2]
		if prev, ok := out[addr]; ok {
			versions := prev.version + ", " + version
			out[addr] = installedProvider{addr: addr, version: versions, problem: "several versions installed (" + versions + ")"}
			continue
		}
		p := installedProvider{addr: addr, version: version}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		var bins []string
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "terraform-provider-"+typ) {
				continue
			}
			path := filepath.Join(dir, e.Name())
			if info, err := os.Stat(path); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
				bins = append(bins, path)
			}
		}
		if len(bins) == 1 {
			p.binary = bins[0]
		} else {
			p.problem = fmt.Sprintf("%d executables named terraform-provider-%s in %s", len(bins), typ, dir)
		}
		out[addr] = p
	}
	return out, nil
}

// providerConfigs reads the provider configurations of the root module in moduleDir and the
// modules `tofu init` installed for it (.terraform/modules/modules.json), and returns, by
// provider address, why a provider has more than one: an alias, configuration aliases, or
// provider blocks in several modules. A provider with one configuration, or none (tofu then
// configures it empty), is not in the map.
func providerConfigs(moduleDir string) (map[string]string, error) {
	dirs := []string{moduleDir}
	manifest, err := os.ReadFile(filepath.Join(moduleDir, dataDir, "modules", "modules.json"))
	switch {
	case err == nil:
		var installed struct {
			Modules []struct {
				Key string `json:"Key"`
				Dir string `json:"Dir"`
			} `json:"Modules"`
		}
		if err := json.Unmarshal(manifest, &installed); err != nil {
			return nil, fmt.Errorf("reading the installed modules: %w", err)
		}
		for _, m := range installed.Modules {
			if m.Key != "" { // "" is the root module
				dirs = append(dirs, filepath.Join(moduleDir, m.Dir))
			}
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("reading the installed modules: %w", err)
	}
	blocks := map[string]int{}
	several := map[string]string{}
	for _, dir := range dirs {
		mod, diags := tfconfig.LoadModuleFromFilesystem(tofuFS{tfconfig.NewOsFs()}, dir)
		if diags.HasErrors() {
			return nil, fmt.Errorf("reading module %s: %w", dir, diags.Err())
		}
		addrOf := func(name string) string {
			source := "hashicorp/" + name
			if req, ok := mod.RequiredProviders[name]; ok && req.Source != "" {
				source = req.Source
			}
			return providerAddr(source)
		}
		for name, req := range mod.RequiredProviders {
			if len(req.ConfigurationAliases) > 0 {
				several[addrOf(name)] = "configuration aliases in " + filepath.Base(dir)
			}
		}
		for _, pc := range mod.ProviderConfigs {
			addr := addrOf(pc.Name)
			if pc.Alias != "" {
				several[addr] = fmt.Sprintf("alias %s.%s", pc.Name, pc.Alias)
				continue
			}
			if blocks[addr]++; blocks[addr] > 1 {
				several[addr] = "provider blocks in several modules"
			}
		}
	}
	return several, nil
}

// providerAddr is the full address of a provider source: [host/]namespace/type, with
// OpenTofu's default host, in lower case.
func providerAddr(source string) string {
	parts := strings.Split(strings.ToLower(strings.TrimSpace(source)), "/")
	switch len(parts) {
	case 1:
		parts = []string{defaultProviderHost, "hashicorp", parts[0]}
	case 2:
		parts = append([]string{defaultProviderHost}, parts...)
	}
	return strings.Join(parts, "/")
}

// providerProcess is a provider plugin the runner started for tofu.
type providerProcess struct {
	addr   string
	cmd    *exec.Cmd
	done   chan struct{} // closed when its stderr is drained
	config tfexec.ReattachConfig
}

// startProvider starts a provider plugin as tofu would (env is tofu's environment; dir the
// module folder) and reads its handshake. Its stderr goes to the run log, except go-plugin's
// JSON log lines, which tofu too drops unless TF_LOG asks for them.
func startProvider(ctx context.Context, p installedProvider, dir string, env map[string]string, out *runLog) (*providerProcess, error) {
	cmd := exec.Command(p.binary)
	cmd.Dir = dir
	cmd.Env = append(envList(env), pluginCookieKey+"="+pluginCookieValue, pluginProtocols+"=5,6")
	dieWithRunner(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	proc := &providerProcess{addr: p.addr, cmd: cmd, done: make(chan struct{})}
	var tail lastLines
	go func() {
		defer close(proc.done)
		keepLogs := env["TF_LOG"] != "" || env["TF_LOG_PROVIDER"] != ""
		lines := bufio.NewScanner(stderr)
		lines.Buffer(make([]byte, 64*1024), 1024*1024)
		for lines.Scan() {
			line := strings.TrimSpace(lines.Text())
			tail.add(line)
			if line != "" && (keepLogs || !strings.HasPrefix(line, `{"@`)) {
				out.message("error", "provider.stderr", p.addr+": "+line)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	handshake := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		handshake <- line
		_, _ = io.Copy(io.Discard, stdout) // go-plugin sends later output over gRPC
	}()
	timer := time.NewTimer(providerStartTimeout)
	defer timer.Stop()
	var line string
	select {
	case line = <-handshake:
	case <-timer.C:
		err = fmt.Errorf("no handshake within %s", providerStartTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		proc.config, err = parseHandshake(line, cmd.Process.Pid)
	}
	if err != nil {
		proc.stop()
		if last := tail.String(); last != "" {
			err = fmt.Errorf("%w; it said: %s", err, last)
		}
		return nil, err
	}
	return proc, nil
}

// parseHandshake reads go-plugin's handshake line,
// CORE-VERSION|PROTOCOL-VERSION|NETWORK|ADDRESS|PROTOCOL[|SERVER-CERT[|MULTIPLEX]], into what
// tofu needs to reattach. Only plain gRPC on a unix socket or TCP is accepted: a server
// certificate would need the client's certificate tofu sends only to plugins it starts.
func parseHandshake(line string, pid int) (tfexec.ReattachConfig, error) {
	fields := strings.Split(strings.TrimSpace(line), "|")
	if len(fields) < 5 {
		return tfexec.ReattachConfig{}, fmt.Errorf("not a plugin handshake: %q", strings.TrimSpace(line))
	}
	version, err := strconv.Atoi(fields[1])
	switch {
	case fields[0] != pluginCoreVersion:
		return tfexec.ReattachConfig{}, fmt.Errorf("plugin core protocol %s, want %s", fields[0], pluginCoreVersion)
	case err != nil || (version != 5 && version != 6):
		return tfexec.ReattachConfig{}, fmt.Errorf("plugin protocol version %q, want 5 or 6", fields[1])
	case fields[2] != "unix" && fields[2] != "tcp":
		return tfexec.ReattachConfig{}, fmt.Errorf("plugin network %q", fields[2])
	case fields[4] != "grpc":
		return tfexec.ReattachConfig{}, fmt.Errorf("plugin protocol %q, want grpc", fields[4])
	case len(fields) > 5 && fields[5] != "":
		return tfexec.ReattachConfig{}, errors.New("the plugin requires TLS")
	}
	// Test: tofu must neither stop the process nor wait for it: the runner does.
	return tfexec.ReattachConfig{Protocol: "grpc", ProtocolVersion: version, Pid: pid, Test: true,
		Addr: tfexec.ReattachConfigAddr{Network: fields[2], String: fields[3]}}, nil
}

// stop kills the provider (tofu has exited: no call is in flight) and waits for it.
func (p *providerProcess) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = p.cmd.Wait()
}

// runProviders are the providers a run started for its tofu command.
type runProviders []*providerProcess

// startRunProviders starts the shareable providers of the working directory moduleDir. When
// one cannot be started, it stops those it started and returns none: tofu starts them all, as
// it would without the runner (the run log says why).
func startRunProviders(ctx context.Context, moduleDir string, env map[string]string, out *runLog) runProviders {
	shared, notShared, err := shareableProviders(moduleDir)
	if err != nil {
		out.note("info", "tofu starts the providers itself: "+err.Error())
		return nil
	}
	if len(notShared) > 0 {
		out.note("info", "tofu starts these providers itself, once per step: "+strings.Join(notShared, "; "))
	}
	var procs runProviders
	for _, addr := range slices.Sorted(maps.Keys(shared)) {
		proc, err := startProvider(ctx, shared[addr], moduleDir, env, out)
		if err != nil {
			procs.stop()
			out.note("info", fmt.Sprintf("tofu starts the providers itself: starting %s: %v", addr, err))
			return nil
		}
		procs = append(procs, proc)
	}
	if len(procs) > 0 {
		started := make([]string, 0, len(procs))
		for _, p := range procs {
			started = append(started, fmt.Sprintf("%s (pid %d)", p.addr, p.config.Pid))
		}
		out.note("info", "one process for the run of each provider: "+strings.Join(started, ", "))
	}
	return procs
}

// reattach is tofu's option to use the run's providers (nil when there are none).
func (ps runProviders) reattach() *tfexec.ReattachOption {
	if len(ps) == 0 {
		return nil
	}
	info := tfexec.ReattachInfo{}
	for _, p := range ps {
		info[p.addr] = p.config
	}
	return tfexec.Reattach(info)
}

func (ps runProviders) stop() {
	for _, p := range ps {
		p.stop()
	}
}

// lastLines keeps the last few lines a provider wrote, for the error when it does not start.
type lastLines struct {
	lines []string
}

func (l *lastLines) add(line string) {
	if line == "" {
		return
	}
	if l.lines = append(l.lines, line); len(l.lines) > 5 {
		l.lines = l.lines[1:]
	}
}

func (l *lastLines) String() string { return strings.Join(l.lines, " / ") }
