// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package nodecheck lets the real tools read what the fulfiller renders for a machine, in
// tests: cloud-init's own schema validation of the user data (`cloud-init schema`, after the
// real base64 and gzip undo a packed one, as a datasource and cloud-init do), kubeadm's own
// validation of the JoinConfiguration it writes (`kubeadm config validate`, of the class's
// Kubernetes version) and shellcheck of the scripts it writes. cloud-init and shellcheck are
// Debian's packages (`.ci/run` installs them), kubeadm is built by hack/tools.sh; a missing
// tool is an error, never a skip.
package nodecheck

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
)

// install says how to get the Debian tools.
const install = "install Debian's packages: apt-get install cloud-init shellcheck (.ci/run does)"

// Tools are the real tools' paths. A tool's verdict on the same input is kept: many user
// data differ only in their packing, and every one carries the same scripts.
type Tools struct {
	CloudInit      string
	ShellcheckPath string
	// Kubeadm is hack/tools.sh's kubeadm (bin/kubeadm); KubeadmFor picks one by version.
	Kubeadm string

	mu       sync.Mutex
	verdicts map[[sha256.Size]byte]error
}

// once runs check unless the same tool already judged the same input (a verdict cut short by
// ctx is not kept).
func (t *Tools) once(ctx context.Context, input []byte, tool string, check func() error) error {
	key := sha256.Sum256(append([]byte(tool+"\x00"), input...))
	t.mu.Lock()
	verdict, ok := t.verdicts[key]
	t.mu.Unlock()
	if ok {
		return verdict
	}
	verdict = check()
	if ctx.Err() != nil {
		return verdict
	}
	t.mu.Lock()
	if t.verdicts == nil {
		t.verdicts = map[[sha256.Size]byte]error{}
	}
	t.verdicts[key] = verdict
	t.mu.Unlock()
	return verdict
}

// Find finds cloud-init and shellcheck on PATH and the pinned kubeadm, or says what is
// missing and how to get it.
func Find() (*Tools, error) {
	var errs []error
	t := &Tools{}
	for name, into := range map[string]*string{"cloud-init": &t.CloudInit, "shellcheck": &t.ShellcheckPath} {
		p, err := exec.LookPath(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s not found: %s", name, install))
		}
		*into = p
	}
	k, err := controlplane.Tool("kubeadm")
	if err != nil {
		errs = append(errs, err)
	}
	t.Kubeadm = k
	return t, errors.Join(errs...)
}

// KubeadmFor returns the kubeadm of a class's Kubernetes version: for an empty version the
// pinned one; else the pinned build of exactly that version when hack/tools.sh made one
// (K8S_VERSION=<version> TOOLS=kubeadm), else the pinned one when its minor is the same (a
// patch release does not change kubeadm's configuration API); otherwise an error saying how
// to build it.
func (t *Tools) KubeadmFor(ctx context.Context, want string) (string, error) {
	if want == "" {
		return t.Kubeadm, nil
	}
	w, err := version.ParseGeneric(want)
	if err != nil {
		return "", fmt.Errorf("kubernetes version %q: %w", want, err)
	}
	exact := filepath.Join(filepath.Dir(controlplane.ToolsBin()), "kubeadm-"+strings.TrimPrefix(w.String(), "v"))
	if info, err := os.Stat(exact); err == nil && info.Mode()&0o111 != 0 {
		return exact, nil
	}
	out, err := exec.CommandContext(ctx, t.Kubeadm, "version", "-o", "short").Output()
	if err != nil {
		return "", fmt.Errorf("kubeadm version: %w", err)
	}
	have, err := version.ParseGeneric(strings.TrimSpace(string(out)))
	if err != nil {
		return "", fmt.Errorf("kubeadm version %q: %w", out, err)
	}
	if have.Major() != w.Major() || have.Minor() != w.Minor() {
		return "", fmt.Errorf("the pinned kubeadm is %s, the class runs %s: build that one with K8S_VERSION=%s TOOLS=kubeadm hack/tools.sh",
			have, want, strings.TrimPrefix(w.String(), "v"))
	}
	return t.Kubeadm, nil
}

// Decode undoes what the fulfiller does to user data over a cloud's limit, with the real
// tools, as a machine does: base64 (coreutils; Hetzner's datasource decodes it) of gzip
// (gzip; cloud-init decompresses it). Other user data is returned as it is.
func Decode(ctx context.Context, data []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(data)
	if bytes.HasPrefix(trimmed, []byte("H4sI")) {
		raw, err := run(ctx, trimmed, "base64", "-d")
		if err != nil {
			return nil, err
		}
		data = raw
	}
	if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		return data, nil
	}
	return run(ctx, data, "gzip", "-dc")
}

// CloudInitSchema runs `cloud-init schema --config-file` on the (decoded) user data: nil when
// cloud-init calls it valid, else cloud-init's own words.
func (t *Tools) CloudInitSchema(ctx context.Context, userData []byte) error {
	decoded, err := Decode(ctx, userData)
	if err != nil {
		return err
	}
	return t.once(ctx, decoded, "cloud-init", func() error {
		f, err := tempFile("user-data-*", decoded)
		if err != nil {
			return err
		}
		defer os.Remove(f)
		out, err := exec.CommandContext(ctx, t.CloudInit, "schema", "--config-file", f).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cloud-init schema: %w: %s", err, bytes.TrimSpace(out))
		}
		if !bytes.Contains(out, []byte("Valid cloud-config")) {
			return fmt.Errorf("cloud-init schema did not call it valid: %s", bytes.TrimSpace(out))
		}
		return nil
	})
}

// KubeadmValidate runs `kubeadm config validate` of kubernetesVersion (KubeadmFor) on a
// JoinConfiguration.
func (t *Tools) KubeadmValidate(ctx context.Context, kubernetesVersion string, config []byte) error {
	kubeadm, err := t.KubeadmFor(ctx, kubernetesVersion)
	if err != nil {
		return err
	}
	return t.once(ctx, config, kubeadm, func() error {
		f, err := tempFile("join-*.yaml", config)
		if err != nil {
			return err
		}
		defer os.Remove(f)
		out, err := exec.CommandContext(ctx, kubeadm, "config", "validate", "--config", f).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubeadm config validate: %w: %s", err, bytes.TrimSpace(out))
		}
		return nil
	})
}

// Shellcheck runs shellcheck on a POSIX sh script (its #! line says which shell).
func (t *Tools) Shellcheck(ctx context.Context, name string, script []byte) error {
	return t.once(ctx, script, "shellcheck", func() error {
		f, err := tempFile("script-*.sh", script)
		if err != nil {
			return err
		}
		defer os.Remove(f)
		out, err := exec.CommandContext(ctx, t.ShellcheckPath, "--shell=sh", "--severity=style", f).CombinedOutput()
		if err != nil {
			return fmt.Errorf("shellcheck %s: %w:\n%s", name, err, bytes.ReplaceAll(out, []byte(f), []byte(name)))
		}
		return nil
	})
}

// File is one write_files entry of a #cloud-config.
type File struct {
	Path        string `json:"path"`
	Content     string `json:"content"`
	Permissions string `json:"permissions"`
}

// WriteFiles returns the write_files of (decoded) #cloud-config user data.
func WriteFiles(ctx context.Context, userData []byte) ([]File, error) {
	decoded, err := Decode(ctx, userData)
	if err != nil {
		return nil, err
	}
	var cc struct {
		WriteFiles []File `json:"write_files"`
	}
	if err := yaml.Unmarshal(decoded, &cc); err != nil {
		return nil, fmt.Errorf("reading write_files: %w", err)
	}
	return cc.WriteFiles, nil
}

// Check runs every check on one user data: cloud-init's schema, kubeadm's validation of each
// file it writes that holds a JoinConfiguration, and shellcheck of each shell script it
// writes. It returns every failure, joined.
func (t *Tools) Check(ctx context.Context, kubernetesVersion string, userData []byte) error {
	var errs []error
	if err := t.CloudInitSchema(ctx, userData); err != nil {
		errs = append(errs, err)
	}
	files, err := WriteFiles(ctx, userData)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	joins := 0
	for _, f := range files {
		switch {
		case strings.Contains(f.Content, "kind: JoinConfiguration"):
			joins++
			if err := t.KubeadmValidate(ctx, kubernetesVersion, []byte(f.Content)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.Path, err))
			}
		case strings.HasPrefix(f.Content, "#!/bin/sh"):
			if err := t.Shellcheck(ctx, f.Path, []byte(f.Content)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if joins == 0 {
		errs = append(errs, errors.New("the user data writes no JoinConfiguration"))
	}
	return errors.Join(errs...)
}

func run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

func tempFile(pattern string, data []byte) (string, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
