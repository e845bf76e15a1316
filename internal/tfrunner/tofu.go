// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/hc-install/fs"
	"github.com/hashicorp/hc-install/product"
)

// OpenTofu is hc-install's product definition of OpenTofu: the binary tofu, whose version is
// what `tofu version -json` reports (the key is terraform_version, as Terraform's).
var OpenTofu = product.Product{
	Name:       "tofu",
	BinaryName: func() string { return "tofu" },
	GetVersion: tofuVersion,
}

// SupportedTofu is the range of tofu versions the runner drives. 1.12 is the oldest the
// shipped modules accept (required_version) and the one the tests run; OpenTofu keeps the
// command line, `-json` output and state format the runner reads compatible within 1.x.
const SupportedTofu = ">= 1.12.0, < 2.0.0"

var supportedTofu = version.MustConstraints(version.NewConstraint(SupportedTofu))

// ShortcutsTofu is the range of tofu versions Request.Shortcuts was written for and tested
// with: the fast paths read and write files whose format tofu does not promise to keep, so
// each tofu minor release is admitted only once the executor contract suite passes on it with
// and without them.
const ShortcutsTofu = ">= 1.12.0, < 1.13.0"

var shortcutsTofu = version.MustConstraints(version.NewConstraint(ShortcutsTofu))

// errShortcutsTofu marks a tofu that Request.Shortcuts was not written for.
var errShortcutsTofu = errors.New("runner shortcuts")

// checkShortcutsTofu fails with errShortcutsTofu when v is outside ShortcutsTofu.
func checkShortcutsTofu(v *version.Version) error {
	if v == nil || !shortcutsTofu.Check(v) {
		return fmt.Errorf("%w are written for tofu %s, not %s: this run uses tofu's public surface only", errShortcutsTofu, ShortcutsTofu, v)
	}
	return nil
}

// ErrUnsupportedTofu marks a tofu binary that cannot be found, run or is outside
// SupportedTofu.
var ErrUnsupportedTofu = errors.New("unsupported tofu")

// tofuVersionTimeout bounds `tofu version -json`.
const tofuVersionTimeout = 30 * time.Second

// LocateTofu finds the tofu binary name names with hc-install's filesystem sources: an
// absolute path as it is (it must be executable), a bare name in PATH. A relative path with
// a folder is taken from the working directory.
func LocateTofu(ctx context.Context, name string) (string, error) {
	var source *fs.AnyVersion
	switch {
	case name == "":
		return "", fmt.Errorf("%w: no tofu binary named", ErrUnsupportedTofu)
	case strings.ContainsRune(name, filepath.Separator):
		abs, err := filepath.Abs(name)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrUnsupportedTofu, err)
		}
		source = &fs.AnyVersion{ExactBinPath: abs}
	default:
		p := OpenTofu
		p.BinaryName = func() string { return name }
		source = &fs.AnyVersion{Product: &p}
	}
	if err := source.Validate(); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnsupportedTofu, err)
	}
	path, err := source.Find(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: tofu %q is not an executable file or not in PATH: %w", ErrUnsupportedTofu, name, err)
	}
	return path, nil
}

// FindTofu locates tofu (LocateTofu) and checks that its version is in SupportedTofu.
func FindTofu(ctx context.Context, name string) (string, *version.Version, error) {
	path, err := LocateTofu(ctx, name)
	if err != nil {
		return "", nil, err
	}
	v, err := OpenTofu.GetVersion(ctx, path)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %s: %w", ErrUnsupportedTofu, path, err)
	}
	if err := CheckTofuVersion(path, v); err != nil {
		return "", nil, err
	}
	return path, v, nil
}

// CheckTofuVersion fails with ErrUnsupportedTofu when v is outside SupportedTofu.
func CheckTofuVersion(path string, v *version.Version) error {
	if !supportedTofu.Check(v) {
		return fmt.Errorf("%w: tofu %s at %s is outside the supported range %s", ErrUnsupportedTofu, v, path, SupportedTofu)
	}
	return nil
}

// tofuVersion runs `tofu version -json`, without TF_CLI_CONFIG_FILE: the version does not
// depend on it, and tofu prints its warning about a configuration it cannot read ahead of the
// JSON.
func tofuVersion(ctx context.Context, path string) (*version.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, tofuVersionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "version", "-json")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TF_CLI_CONFIG_FILE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CHECKPOINT_DISABLE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("tofu version -json: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseTofuVersion(out)
}

// parseTofuVersion reads the version of `tofu version -json`'s output.
func parseTofuVersion(out []byte) (*version.Version, error) {
	var reported struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &reported); err != nil {
		return nil, fmt.Errorf("reading tofu version -json: %w", err)
	}
	v, err := version.NewVersion(reported.Version)
	if err != nil {
		return nil, fmt.Errorf("reading tofu version -json: %w", err)
	}
	return v, nil
}
