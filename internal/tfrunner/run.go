// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// TofuInterruptGrace is how long a cancelled run waits for tofu to stop after SIGINT (and
// release its state lock) before killing it. Whatever stops a runner must wait longer.
const TofuInterruptGrace = 60 * time.Second

// Files and folders inside Request.WorkDir.
const (
	moduleSubdir    = "module"
	packageSubdir   = "package" // a fetched package whose subdirectory is the module
	fetchSubdir     = "fetch"
	homeSubdir      = "home"
	binSubdir       = "bin" // BinaryCommand, first on tofu's PATH
	varsFileName    = "fulfiller.tfvars.json"
	cliConfigName   = "fulfiller.tfrc"
	backendFileName = "fulfiller_backend.tf"
)

// Run performs one tofu operation for one claim. It has no error return: every failure ends
// up, classified, in Result.Error. Each line of tofu's `-json` output is copied
// to log as it arrives, together with a few lines of the runner's own in the same JSON shape.
// The log and Result.Error's message have every secret redacted: the user data, the values of
// sensitive variables, and every value of the request's environment and the runner's
// TofuEnvPrefix variables (credentials, the connection string, the encryption configuration)
// with the passwords and passphrases inside them. Cancelling ctx interrupts tofu (SIGINT)
// and waits for it to stop, so it releases the state lock; the result then has class
// Cancelled (or Timeout when ctx's deadline passed). Failures are classified with the generic
// rules and those of the request's family in rules (nil: the generic rules only).
func Run(ctx context.Context, req Request, log io.Writer, rules RuleSet) Result {
	phases := startPhases()
	res := Result{Operation: req.Operation, Started: time.Now().UTC()}
	out := newRunLog(log, secretValues(req.Variables, nil))
	values, passwords, pieces := envSecrets(req.Env, tofuEnvFromRunner())
	out.addSecrets(minEnvLen, values)
	out.addSecrets(minEnvLen, passwords)
	out.addSecrets(minPieceLen, pieces)
	out.note("info", fmt.Sprintf("%s of run %s started", req.Operation, req.Name))

	err := run(ctx, req, out, &res, phases)
	if err != nil && ctx.Err() != nil {
		// tfexec's error matches both context.Canceled and context.DeadlineExceeded; the
		// context says which it was.
		err = fmt.Errorf("%w (%s)", ctx.Err(), message.Short(err.Error()))
	}
	out.flush()
	runRules := rules.For(req.Family)
	if own, cerr := CompileErrorRules(req.ErrorRules); cerr == nil && own != nil {
		runRules = own // a generic module's (Validate refuses them with a family)
	}
	res.Error = Classify(out.diagnostics(), err, runRules)
	if res.Error != nil {
		res.Error.Message = out.redact(res.Error.Message)
		// The family asks its API with the credentials tofu had: the runner's TofuEnvPrefix
		// variables (a chart's runner.envFromSecrets), then the class's.
		env := tofuEnvFromRunner()
		maps.Copy(env, req.Env)
		if at := retryAfter(ctx, rules.For(req.Family), res.Error, out.diagnostics(), env); at != nil {
			res.Error.RetryAfter = at
			out.note("info", "the cloud API's rate limit resets at "+at.Format(time.RFC3339)+": no retry before")
		}
		res.Succeeded = false
		res.Outputs, res.ProviderID, res.NodeName, res.Addresses = nil, "", "", nil
		out.note("error", fmt.Sprintf("%s of run %s failed: %s", req.Operation, req.Name, res.Error.Error()))
	} else {
		res.Succeeded = true
		out.note("info", fmt.Sprintf("%s of run %s succeeded", req.Operation, req.Name))
	}
	res.Phases = phases.phases
	out.note("info", "phases: "+phases.String())
	res.Finished = time.Now().UTC()
	return res
}

func run(ctx context.Context, req Request, out *runLog, res *Result, phases *phaseClock) error {
	if err := req.Validate(); err != nil {
		return err
	}
	env, err := runEnv(req)
	if err != nil {
		return err
	}
	// In a pod, the kubernetes state backend authenticates as the runner's service account
	// (req is this run's copy: the module cache and init see the same backend).
	saKubeconfig := runnerKubeconfig(req.WorkDir)
	if req.Backend, err = serviceAccountBackend(req.Backend, env, os.Getenv, saKubeconfig); err != nil {
		return err
	}
	asServiceAccount := req.Backend.Config["config_path"] == saKubeconfig
	if asServiceAccount {
		env[ClusterKubeconfigEnv] = saKubeconfig
	}
	moduleDir := filepath.Join(req.WorkDir, moduleSubdir)
	if req.TofuPath, err = LocateTofu(ctx, req.TofuPath); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	copied := false // moduleDir holds the module already
	if req.ModuleSource != "" {
		out.note("info", "fetching module "+req.ModuleSource+versionNote(req.ModuleVersion)+" (tofu get)")
		fetched, err := FetchModule(ctx, req.TofuPath, req.ModuleSource, req.ModuleVersion, filepath.Join(req.WorkDir, fetchSubdir), env)
		if err != nil {
			return err
		}
		req.ModuleDir = fetched.Dir
		out.note("info", "fetched module "+fetched.Digest+commitNote(fetched.Commit)+versionNote(fetched.Version))
		if fetched.Package != fetched.Dir {
			// The module is a subdirectory of what tofu fetched and may use the package's
			// other folders: the run copies the whole package, then works in the module.
			rel, _ := filepath.Rel(fetched.Package, fetched.Dir)
			if err := prepareModule(fetched.Package, filepath.Join(req.WorkDir, packageSubdir)); err != nil {
				return err
			}
			moduleDir, copied = filepath.Join(req.WorkDir, packageSubdir, rel), true
		}
	}
	if req.ModuleDigest != "" {
		digest, err := ModuleDigest(req.ModuleDir)
		if err != nil {
			return err
		}
		if digest != req.ModuleDigest {
			msg := fmt.Sprintf("the module's content is %s, not %s, which the claim was created with", digest, req.ModuleDigest)
			if req.Operation == Apply {
				return fmt.Errorf("%w: %s", ErrInvalidModule, msg)
			}
			out.note("warn", msg+": destroying with it")
		}
	}
	tofu := req.TofuPath
	var cache *cachedRun
	if cacheable(req) && !copied {
		cache, err = useModuleCache(ctx, req, env, moduleDir, out, phases)
		if errors.Is(err, errShortcutsTofu) {
			out.note("warn", err.Error())
			req.Shortcuts = false
		} else if err != nil {
			return err
		}
	}
	if cache != nil {
		tofu = cache.tofu
	} else {
		if !copied {
			if err := prepareModule(req.ModuleDir, moduleDir); err != nil {
				return err
			}
		}
		if err := writeBackendFile(moduleDir, req.Backend); err != nil {
			return err
		}
	}
	info, err := InspectModule(moduleDir)
	if err != nil {
		return err
	}
	if _, ok := info.Outputs[OutputProviderID]; !ok && req.Operation == Apply {
		return fmt.Errorf("%w: the module has no output %s", ErrInvalidModule, OutputProviderID)
	}
	out.addSecrets(minSecretLen, secretValues(req.Variables, info))
	varsFile := filepath.Join(req.WorkDir, varsFileName)
	passed, skipped, err := writeVarsFile(varsFile, req.Variables, info)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(varsFile) }()
	out.note("info", "passing variables: "+strings.Join(passed, ", "))
	if len(skipped) > 0 {
		out.note("info", "not passing variables the module does not declare: "+strings.Join(skipped, ", "))
	}
	if asServiceAccount {
		out.note("info", "state backend: authenticating as the pod's service account")
	}

	tf, err := newTofu(moduleDir, tofu, env, out)
	if err != nil {
		return err
	}
	phases.end(PhaseModule)
	if v, _, err := tf.Version(ctx, false); err != nil {
		return fmt.Errorf("tofu version: %w", err)
	} else if err := CheckTofuVersion(req.TofuPath, v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	} else if req.Shortcuts {
		if err := checkShortcutsTofu(v); err != nil {
			out.note("warn", err.Error())
			req.Shortcuts = false
		}
	}
	phases.end(PhaseVersion)

	if cache != nil {
		err = cache.configureBackend(ctx, tf)
	} else {
		err = initBackend(ctx, tf, out, req.Backend)
	}
	if err != nil {
		return err
	}
	phases.end(PhaseInit)
	if req.Workspace != "" {
		if cache != nil {
			err = writeWorkspace(moduleDir, req.Workspace)
		} else {
			err = selectWorkspace(ctx, tf, req.Workspace)
		}
		if err != nil {
			return err
		}
		phases.end(PhaseWorkspace)
	}

	lockTimeout := tfexec.LockTimeout(fmt.Sprintf("%dms", req.LockTimeout.Milliseconds()))
	applyOpts := []tfexec.ApplyOption{tfexec.VarFile(varsFile), lockTimeout}
	destroyOpts := []tfexec.DestroyOption{tfexec.VarFile(varsFile), lockTimeout}
	var providers runProviders
	if req.Shortcuts {
		providers = startRunProviders(ctx, moduleDir, env, out)
	}
	if r := providers.reattach(); r != nil {
		applyOpts, destroyOpts = append(applyOpts, r), append(destroyOpts, r)
	}
	switch req.Operation {
	case Apply:
		err = tf.ApplyJSON(ctx, out, applyOpts...)
	case Destroy:
		err = tf.DestroyJSON(ctx, out, destroyOpts...)
	}
	providers.stop() // tofu has exited; the phase counts their CPU once they are reaped
	if err != nil {
		return fmt.Errorf("tofu %s: %w", req.Operation, err)
	}
	phases.end(string(req.Operation))
	if req.Operation != Apply {
		return nil
	}

	// The apply's stream ends with the outputs' values, but not those of sensitive outputs:
	// only a sensitive provider_id, node_name or addresses (or a stream without outputs)
	// needs `tofu output`.
	outputs, ok := out.finalOutputs()
	for _, name := range []string{OutputProviderID, OutputNodeName, OutputAddresses} {
		ok = ok && !outputs[name].Sensitive
	}
	if !ok {
		tf.SetStdout(io.Discard) // output -json holds sensitive values: keep them out of the log
		all, err := tf.Output(ctx)
		if err != nil {
			return fmt.Errorf("tofu output: %w", err)
		}
		phases.end(PhaseOutput)
		return readOutputs(all, res)
	}
	return readOutputs(streamedOutputs(outputs), res)
}

func commitNote(commit string) string {
	if commit == "" {
		return ""
	}
	return " at commit " + commit
}

func versionNote(version string) string {
	if version == "" {
		return ""
	}
	return " version " + version
}

// newTofu is a terraform-exec handle on tofu for one run in moduleDir, its stdout going to
// the run log (set per command) and its stderr to the run log.
func newTofu(moduleDir, tofu string, env map[string]string, out *runLog) (*tfexec.Terraform, error) {
	tf, err := tfexec.NewTerraform(moduleDir, tofu)
	if err != nil {
		return nil, fmt.Errorf("using tofu at %s: %w", tofu, err)
	}
	if err := tf.SetEnv(env); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	tf.SetStderr(out.stderr())
	// Interrupt first, kill after the grace (terraform-exec refuses this only on Windows).
	if err := tf.SetWaitDelay(TofuInterruptGrace); err != nil {
		return nil, fmt.Errorf("setting tofu's interrupt grace: %w", err)
	}
	return tf, nil
}

// initBackend runs `tofu init` with the backend's -backend-config.
func initBackend(ctx context.Context, tf *tfexec.Terraform, out *runLog, b Backend) error {
	opts := []tfexec.InitOption{tfexec.Reconfigure(true), tfexec.Upgrade(false)}
	for _, kv := range backendConfig(b) {
		opts = append(opts, tfexec.BackendConfig(kv))
	}
	if err := tf.InitJSON(ctx, out, opts...); err != nil {
		return fmt.Errorf("tofu init: %w", err)
	}
	return nil
}

// streamedOutputs are the outputs of an apply's stream in the shape `tofu output -json` has.
func streamedOutputs(outputs map[string]streamOutput) map[string]tfexec.OutputMeta {
	metas := make(map[string]tfexec.OutputMeta, len(outputs))
	for name, o := range outputs {
		metas[name] = tfexec.OutputMeta{Sensitive: o.Sensitive, Type: o.Type, Value: o.Value}
	}
	return metas
}

// selectWorkspace selects a workspace, creating it when it does not exist yet. A concurrent
// run may create it in between: then selecting it succeeds.
func selectWorkspace(ctx context.Context, tf *tfexec.Terraform, name string) error {
	existing, _, err := tf.WorkspaceList(ctx)
	if err != nil {
		return fmt.Errorf("tofu workspace list: %w", err)
	}
	if !slices.Contains(existing, name) {
		if err := tf.WorkspaceNew(ctx, name); err == nil {
			return nil
		}
	}
	if err := tf.WorkspaceSelect(ctx, name); err != nil {
		return fmt.Errorf("tofu workspace select %s: %w", name, err)
	}
	return nil
}

// prepareModule copies the module at src into dst, which it empties first. Hidden files and
// folders (.terraform, .git), state files and variable files that tofu would load on its own
// are left out; .terraform.lock.hcl is kept.
func prepareModule(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("emptying %s: %w", dst, err)
	}
	if info, err := os.Stat(src); err != nil || !info.IsDir() {
		return fmt.Errorf("%w: module folder %s cannot be read", ErrInvalidModule, src)
	}
	if err := copyTree(src, dst); err != nil {
		return fmt.Errorf("copying module %s: %w", src, err)
	}
	return nil
}

func copyTree(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		if skipModuleFile(name) || from == filepath.Dir(dst) {
			continue
		}
		info, err := os.Stat(from) // follows symbolic links
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			err = copyTree(from, to)
		case info.Mode().IsRegular():
			err = copyFile(from, to, info.Mode().Perm())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func skipModuleFile(name string) bool {
	if name == ".terraform.lock.hcl" {
		return false
	}
	return strings.HasPrefix(name, ".") ||
		strings.HasSuffix(name, ".tfstate") || strings.HasSuffix(name, ".tfstate.backup") ||
		name == "terraform.tfvars" || name == "terraform.tfvars.json" ||
		strings.HasSuffix(name, ".auto.tfvars") || strings.HasSuffix(name, ".auto.tfvars.json")
}

func copyFile(from, to string, perm os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// writeBackendFile declares the backend with an empty (partial) configuration; its settings
// come from -backend-config. Without a backend type the module's own setting (or local state
// in the working directory) applies.
func writeBackendFile(moduleDir string, b Backend) error {
	if b.Type == "" {
		if len(b.Config) > 0 || len(b.Maps) > 0 {
			return fmt.Errorf("%w: backend configuration without a backend type", ErrInvalidRequest)
		}
		return nil
	}
	content := fmt.Sprintf("# Written by the fulfiller; configured with -backend-config.\nterraform {\n  backend %q {}\n}\n", b.Type)
	if err := os.WriteFile(filepath.Join(moduleDir, backendFileName), []byte(content), 0o600); err != nil {
		return fmt.Errorf("writing backend file: %w", err)
	}
	return nil
}

func backendConfig(b Backend) []string {
	values := maps.Clone(b.Config)
	if values == nil {
		values = map[string]string{}
	}
	for k, m := range b.Maps {
		values[k] = hclStringMap(m)
	}
	kvs := make([]string, 0, len(values))
	for _, k := range slices.Sorted(maps.Keys(values)) {
		kvs = append(kvs, k+"="+values[k])
	}
	return kvs
}

// hclStringMap writes a map of strings as an HCL object, the form -backend-config takes for a
// map argument (tofu parses a non-primitive value as an expression). Template sequences are
// escaped, so a value reaches the backend unchanged.
func hclStringMap(m map[string]string) string {
	quote := func(s string) string {
		return strings.NewReplacer("${", "$${", "%{", "%%{").Replace(strconv.Quote(s))
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, quote(k)+" = "+quote(m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// writeVarsFile writes the variables the module declares to a 0600 file and returns the names
// it passed and those it left out.
func writeVarsFile(path string, vars map[string]any, info *ModuleInfo) (passed, skipped []string, err error) {
	declared := make(map[string]any, len(vars))
	for name, v := range vars {
		if _, ok := info.Variables[name]; ok {
			declared[name] = v
			passed = append(passed, name)
		} else {
			skipped = append(skipped, name)
		}
	}
	sort.Strings(passed)
	sort.Strings(skipped)
	data, err := json.MarshalIndent(declared, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: encoding variables: %w", ErrInvalidRequest, err)
	}
	if err := WriteFileAtomic(path, data, 0o600); err != nil {
		return nil, nil, err
	}
	return passed, skipped, nil
}

// runEnv is the whole environment of tofu and its provisioners: a few variables of the
// runner's own environment, settings that make tofu independent of the runner's home folder,
// the runner's TofuEnvPrefix variables without the prefix, then Request.Env, which wins.
func runEnv(req Request) (map[string]string, error) {
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, k := range []string{"PATH", "TMPDIR", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	home := filepath.Join(req.WorkDir, homeSubdir)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("creating home folder: %w", err)
	}
	cliConfig := filepath.Join(req.WorkDir, cliConfigName)
	if err := os.WriteFile(cliConfig, []byte("# OpenTofu CLI configuration written by the fulfiller.\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing cli configuration: %w", err)
	}
	env["HOME"] = home
	env["TF_CLI_CONFIG_FILE"] = cliConfig
	env["CHECKPOINT_DISABLE"] = "1"
	if bin := os.Getenv(BinaryEnv); bin != "" {
		env[BinaryEnv] = bin
	} else if exe, err := os.Executable(); err == nil {
		env[BinaryEnv] = exe
	}
	maps.Copy(env, tofuEnvFromRunner())
	maps.Copy(env, req.Env)
	if bad := tfexec.ProhibitedEnv(env); len(bad) > 0 {
		sort.Strings(bad)
		return nil, fmt.Errorf("%w: environment variables tofu must not get this way: %s", ErrInvalidRequest, strings.Join(bad, ", "))
	}
	if bin := env[BinaryEnv]; bin != "" {
		// A provisioner runs it by name, with no shell: interpreter = ["fulfiller", ...].
		dir := filepath.Join(req.WorkDir, binSubdir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating bin folder: %w", err)
		}
		if path, err := exec.LookPath(bin); err == nil {
			bin = path
		}
		if abs, err := filepath.Abs(bin); err == nil {
			bin = abs
		}
		link := filepath.Join(dir, BinaryCommand)
		if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("linking %s: %w", BinaryCommand, err)
		}
		if err := os.Symlink(bin, link); err != nil {
			return nil, fmt.Errorf("linking %s: %w", BinaryCommand, err)
		}
		env["PATH"] = dir + string(os.PathListSeparator) + env["PATH"]
	}
	return env, nil
}

// readOutputs fills the result from `tofu output -json`. Sensitive outputs are not kept in
// Outputs (results are stored in the cluster), but provider_id is read either way.
func readOutputs(outputs map[string]tfexec.OutputMeta, res *Result) error {
	res.Outputs = make(map[string]json.RawMessage, len(outputs))
	for name, o := range outputs {
		if o.Sensitive {
			continue
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, o.Value); err != nil {
			return fmt.Errorf("reading output %s: %w", name, err)
		}
		res.Outputs[name] = compact.Bytes()
	}
	pid, ok := outputs[OutputProviderID]
	if !ok {
		return fmt.Errorf("%w: the module has no output %s", ErrInvalidModule, OutputProviderID)
	}
	if err := json.Unmarshal(pid.Value, &res.ProviderID); err != nil || res.ProviderID == "" {
		return fmt.Errorf("%w: output %s must be a non-empty string, got %s", ErrInvalidModule, OutputProviderID, message.ShortenTo(string(pid.Value), 80))
	}
	if o, ok := outputs[OutputNodeName]; ok {
		if err := json.Unmarshal(o.Value, &res.NodeName); err != nil {
			return fmt.Errorf("%w: output %s must be a string: %w", ErrInvalidModule, OutputNodeName, err)
		}
	}
	if o, ok := outputs[OutputAddresses]; ok {
		if err := json.Unmarshal(o.Value, &res.Addresses); err != nil {
			return fmt.Errorf("%w: output %s must be a list of strings: %w", ErrInvalidModule, OutputAddresses, err)
		}
	}
	return nil
}

// secretValues are the string values of user_data and of the variables the module marks
// sensitive.
func secretValues(vars map[string]any, info *ModuleInfo) []string {
	var secrets []string
	for name, v := range vars {
		s, ok := v.(string)
		if !ok {
			continue
		}
		if name == VarUserData || info != nil && info.Variables[name].Sensitive {
			secrets = append(secrets, s)
		}
	}
	return secrets
}

// BinaryEnv names the fulfiller binary for tofu's provisioners (modules/sim and
// modules/hetzner-robot run its commands). The runner passes its own on, unless whoever
// started it named another: the runner binary alone (cmd/fulfiller-runner) has no such
// commands, and the local executor names the binary it runs in.
const BinaryEnv = "FULFILLER_BINARY"

// BinaryCommand is the name under which the BinaryEnv binary is first on tofu's PATH, so that
// a provisioner runs its commands without a shell (modules/hetzner-robot's
// `interpreter = ["fulfiller", "robot"]`), as the image has none.
const BinaryCommand = "fulfiller"

// TofuEnvPrefix marks runner environment variables that are passed on to tofu without the
// prefix. A runner Job gets the keys of executor.Job.EnvFromSecrets this way, so credentials
// reach tofu and its provisioners without appearing in the Job or the request.
const TofuEnvPrefix = "FULFILLER_TOFU_ENV_"

// tofuEnvFromRunner returns the runner's TofuEnvPrefix variables without the prefix.
func tofuEnvFromRunner() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if rest, ok := strings.CutPrefix(kv, TofuEnvPrefix); ok {
			if k, v, ok := strings.Cut(rest, "="); ok && k != "" {
				env[k] = v
			}
		}
	}
	return env
}
