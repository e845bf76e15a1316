// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package tfrunner runs OpenTofu for one claim: it prepares a per-run working directory from
// a node type's module, writes the variables (secrets only in a 0600 file), drives `tofu init`
// and `apply`/`destroy` through terraform-exec with `-json` output streamed into the run log,
// reads the module's outputs and classifies failures. The executors start runs as separate
// processes (`fulfiller run`) so that a controller restart does not interrupt them.
package tfrunner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Operation is what a run does to a claim's infrastructure.
type Operation string

const (
	// Apply creates or updates the node's infrastructure.
	Apply Operation = "apply"
	// Destroy removes it.
	Destroy Operation = "destroy"
)

// Backend selects where the run's state lives. The module gets a partial
// `backend "<Type>" {}` block; Config is passed as -backend-config key=value pairs, and Maps
// (settings that are maps of strings, such as the kubernetes backend's labels) as
// key={"k" = "v", ...}. Values in Config and Maps end up on the command line and in
// .terraform/: credentials belong in Request.Env.
type Backend struct {
	Type   string                       `json:"type"`
	Config map[string]string            `json:"config,omitempty"`
	Maps   map[string]map[string]string `json:"maps,omitempty"`
}

// Request is one tofu operation for one claim. It is written to a 0600 file and read by the
// runner process, because Variables holds the claim's user data.
type Request struct {
	// Name identifies the run (a DNS-1123 label, e.g. "<claim>-apply-1").
	Name      string    `json:"name"`
	Operation Operation `json:"operation"`
	// Family is the node-type family of the claim's class (empty: a generic module): its
	// error rules classify the run's failures.
	Family string `json:"family,omitempty"`
	// ErrorRules are the class's own error rules, for a module without a family: they
	// classify the run's failures before the generic rules.
	ErrorRules []ErrorRule `json:"errorRules,omitempty"`
	// ModuleDir is the node type's module (a local folder); it is copied, never changed.
	ModuleDir string `json:"moduleDir,omitempty"`
	// ModuleSource, instead of ModuleDir, is a remote module source (FetchModule): the run
	// fetches it with `tofu get` into its work folder and uses what it fetched.
	ModuleSource string `json:"moduleSource,omitempty"`
	// ModuleVersion is a registry source's version constraint, the exact version the claim
	// was created with ("1.2.3"), so that every run fetches that release.
	ModuleVersion string `json:"moduleVersion,omitempty"`
	// ModuleDigest, when set, is the content the module must have (ModuleDigest), the one
	// the claim was created with: an apply of other content fails with InvalidModule; a
	// destroy says so in its log and goes on, since a machine must not outlive its module.
	ModuleDigest string `json:"moduleDigest,omitempty"`
	// WorkDir is a fresh folder the run owns.
	WorkDir string `json:"workDir"`
	// CacheDir is a folder the runner keeps initialised modules in, shared by the runs of
	// one executor; only runs with Shortcuts use it (empty: none).
	CacheDir string  `json:"cacheDir,omitempty"`
	Backend  Backend `json:"backend"`
	// Workspace is the OpenTofu workspace the operation uses (empty: default), for backends
	// that keep one state per workspace (pg). init runs in the default workspace; the runner
	// then selects this one, creating it when missing.
	Workspace string `json:"workspace,omitempty"`
	// Variables are the module inputs of the module contract: node_name, node_type, zone,
	// user_data (sensitive), labels, parameters. Only those the module declares are passed.
	Variables map[string]any `json:"variables,omitempty"`
	// Env is extra environment for tofu and its provisioners (credentials, KUBECONFIG, ...).
	Env map[string]string `json:"env,omitempty"`
	// TofuPath is the tofu binary.
	TofuPath string `json:"tofuPath"`
	// Shortcuts turns on the runner's fast paths, which rest on tofu's private files and
	// undocumented behaviour rather than its public surface (commands, -json output,
	// environment variables, the CLI configuration): the module cache (CacheDir, modcache.go),
	// which writes tofu's backend record and workspace file itself and answers
	// terraform-exec's version probe from a wrapper, and providers the runner starts once per
	// run for tofu to reattach to (providers.go). They were written for the tofu versions in
	// ShortcutsTofu; with another tofu the run takes the plain path and its log says so.
	// Off (the default), tofu initialises every run's working directory and starts its own
	// providers.
	Shortcuts bool `json:"shortcuts,omitempty"`
	// LockTimeout is how long tofu retries a held state lock (0: fail at once).
	LockTimeout time.Duration `json:"lockTimeout,omitempty"`
	// Deadline bounds the run from the runner's start (0: no bound of its own). Past it the
	// runner interrupts tofu, which releases its lock, and the run fails with class Timeout.
	Deadline time.Duration `json:"deadline,omitempty"`
	// Labels go on what the executor creates for the run (the Job executor's Job, pod and
	// Secret), e.g. keys.LabelNodeClaim.
	Labels map[string]string `json:"labels,omitempty"`
}

// Result is the outcome of a run, written by the runner process for its parent.
type Result struct {
	Operation Operation `json:"operation"`
	Succeeded bool      `json:"succeeded"`
	// Outputs are the module's non-sensitive outputs after an apply, as JSON values.
	Outputs map[string]json.RawMessage `json:"outputs,omitempty"`
	// ProviderID, NodeName and Addresses are read from the outputs provider_id (required
	// after an apply), node_name and addresses (a list of strings).
	ProviderID string    `json:"providerID,omitempty"`
	NodeName   string    `json:"nodeName,omitempty"`
	Addresses  []string  `json:"addresses,omitempty"`
	Error      *RunError `json:"error,omitempty"`
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	// Phases are the wall-clock and CPU times of the run's steps, in order.
	Phases []Phase `json:"phases,omitempty"`
}

// RunError is a classified failure.
type RunError struct {
	Class ErrorClass `json:"class"`
	// Message is one line of at most message.MaxLength bytes (message.Short).
	Message string `json:"message"`
	// RetryAfter, when set, is the earliest time another run can succeed: the reset of the
	// cloud API's rate limit that failed the run (RetryTimer).
	RetryAfter *time.Time `json:"retryAfter,omitempty"`
}

func (e *RunError) Error() string {
	return string(e.Class) + ": " + e.Message
}

// ErrInvalidRequest marks a request that cannot be run as given.
var ErrInvalidRequest = errors.New("invalid request")

// Validate checks the fields a run needs.
func (r Request) Validate() error {
	if err := ValidateName(r.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if r.Operation != Apply && r.Operation != Destroy {
		return fmt.Errorf("%w: unknown operation %q", ErrInvalidRequest, r.Operation)
	}
	for field, v := range map[string]string{"workDir": r.WorkDir, "tofuPath": r.TofuPath} {
		if v == "" {
			return fmt.Errorf("%w: %s is empty", ErrInvalidRequest, field)
		}
	}
	if (r.ModuleDir == "") == (r.ModuleSource == "") {
		return fmt.Errorf("%w: set exactly one of moduleDir and moduleSource", ErrInvalidRequest)
	}
	if r.ModuleVersion != "" {
		if r.ModuleSource == "" {
			return fmt.Errorf("%w: moduleVersion is for a registry moduleSource", ErrInvalidRequest)
		}
		if err := CheckModuleVersion(r.ModuleSource, r.ModuleVersion); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	if r.Backend.Type != "" && !isIdentifier(r.Backend.Type) {
		return fmt.Errorf("%w: invalid backend type %q", ErrInvalidRequest, r.Backend.Type)
	}
	if r.Workspace != "" && !isWorkspaceName(r.Workspace) {
		return fmt.Errorf("%w: invalid workspace name %q", ErrInvalidRequest, r.Workspace)
	}
	if len(r.ErrorRules) > 0 && r.Family != "" {
		return fmt.Errorf("%w: error rules are for a module without a family; family %s has its own", ErrInvalidRequest, r.Family)
	}
	if _, err := CompileErrorRules(r.ErrorRules); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if r.LockTimeout < 0 || r.Deadline < 0 {
		return fmt.Errorf("%w: negative lock timeout or deadline", ErrInvalidRequest)
	}
	return nil
}

// maxNameLen is the longest run name: a Job's name is also the value of its pods'
// batch.kubernetes.io/job-name label, and the runner pod's hostname.
const maxNameLen = 63

// RunName names the run of one operation of a claim: "<claim>-<operation>-<attempt>"
// (sim-x7k2q-apply-1). When that is no DNS-1123 label of at most 63 characters (a claim of a
// long NodePool name, or one with dots), it is the claim's name cut short with dots made
// dashes, a hash of the full name, and the operation and attempt:
// "<claim prefix>-<hash>-<operation>-<attempt>". The same arguments always give the same
// name, so a restarted controller finds its runs.
func RunName(claim string, op Operation, attempt int) string {
	full := fmt.Sprintf("%s-%s-%d", claim, op, attempt)
	if ValidateName(full) == nil {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	suffix := fmt.Sprintf("-%s-%s-%d", hex.EncodeToString(sum[:4]), op, attempt)
	prefix := strings.ReplaceAll(claim, ".", "-")
	if n := maxNameLen - len(suffix); len(prefix) > n {
		prefix = prefix[:max(n, 0)]
	}
	return strings.Trim(prefix, "-") + suffix
}

// ValidateName accepts a DNS-1123 label: what Kubernetes accepts as a Job name.
func ValidateName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("run name %q must have 1 to 63 characters", name)
	}
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(name)-1) {
			return fmt.Errorf("run name %q is not a DNS-1123 label", name)
		}
	}
	return nil
}

// isIdentifier accepts a backend type name (letters, digits, "_", "-"); it is written into
// the module as a block label.
func isIdentifier(s string) bool {
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '-')) {
			return false
		}
	}
	return s != ""
}

// isWorkspaceName accepts a DNS-1123 label as a workspace name (OpenTofu accepts more, but
// state keys are labels).
func isWorkspaceName(s string) bool {
	return ValidateName(s) == nil
}

// WriteRequest writes req to path (mode 0600, atomically).
func WriteRequest(path string, req Request) error {
	return WriteJSON(path, req)
}

// ReadRequest reads a request written by WriteRequest.
func ReadRequest(path string) (Request, error) {
	var req Request
	return req, ReadJSON(path, &req)
}

// WriteResult writes res to path (mode 0600, atomically).
func WriteResult(path string, res Result) error {
	return WriteJSON(path, res)
}

// ReadResult reads a result written by WriteResult.
func ReadResult(path string) (Result, error) {
	var res Result
	return res, ReadJSON(path, &res)
}

// WriteJSON writes v as indented JSON to path (0600, atomically): a run's files.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	return WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// ReadJSON decodes the JSON file at path into v.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err // already names the path; callers test errors.Is(err, fs.ErrNotExist)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

// WriteFileAtomic writes data next to path and renames it into place, so a reader sees the
// old content or the new one, never a part.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Files of a local run, next to the request (the runner's --request): the request holds the
// claim's user data and credentials, and the runner removes it once it has read it.
const (
	RequestFileName = "request.json"
	ResultFileName  = "result.json"
)
