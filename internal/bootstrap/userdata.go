// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Errors of rendering user data; the claims controller maps them to condition reasons.
var (
	// ErrUserDataTooLarge: even compressed, the user data is over the node type's limit.
	ErrUserDataTooLarge = errors.New("user data too large")
	// ErrInvalidCloudConfig: the NodeClass's extra cloud-config cannot be merged.
	ErrInvalidCloudConfig = errors.New("invalid extra cloud-config")
)

// cloudConfig is the part of #cloud-config the fulfiller reads back.
type cloudConfig struct {
	WriteFiles []writeFile `json:"write_files"`
	RunCmd     []any       `json:"runcmd"`
}

type writeFile struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner,omitempty"`
	Content     string `json:"content"`
}

const cloudConfigHeader = "#cloud-config\n"

// gzipBase64Prefix is how base64 of a gzip stream (magic 1f 8b 08) starts.
const gzipBase64Prefix = "H4sI"

// RenderUserData renders the cloud-init user data that joins the machine (see
// docs/node-bootstrap.md): write_files puts the JoinConfiguration (0600), the boot script, its
// settings (0600) and, with spec.Install.Packages, the install script on the machine, and
// runcmd runs the boot script once: it installs the node software when asked, reads the
// instance ID into the JoinConfiguration from the metadata service (ProviderIDFrom), runs
// `kubeadm join`, reports its progress (spec.Report) and removes the files that hold the
// token. The NodeClass's extra cloud-config is merged in (mergeCloudConfig); over the node
// type's limit the whole is gzipped and base64-encoded.
func RenderUserData(spec JoinSpec) ([]byte, error) {
	if err := spec.Install.Validate(); err != nil {
		return nil, err
	}
	join, err := yaml.Marshal(spec.JoinConfiguration())
	if err != nil {
		return nil, fmt.Errorf("encoding JoinConfiguration: %w", err)
	}
	env := []envVar{{"FULFILLER_JOIN_CONFIG", JoinConfigPath}, {"FULFILLER_INSTALL", spec.Install.mode()}}
	if src := spec.ProviderIDFrom; src != nil {
		if err := src.Validate(); err != nil {
			return nil, err
		}
		env = append(env, envVar{"FULFILLER_INSTANCE_ID_URL", src.URL})
	}
	files := []any{
		file(JoinConfigPath, "0600", string(join)),
		file(BootScriptPath, "0755", string(BootScript)),
	}
	if spec.Install.Packages {
		env = append(env, spec.Install.env()...)
		files = append(files, file(InstallScriptPath, "0755", string(InstallScript)))
	}
	if r := spec.Report; r != nil {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		env = append(env, envVar{"FULFILLER_REPORT_URL", r.URL}, envVar{"FULFILLER_REPORT_CA", ReportCAPath}, envVar{"FULFILLER_REPORT_AUTH", ReportAuthPath})
		files = append(files,
			file(ReportCAPath, "0644", string(r.CAPEM)),
			file(ReportAuthPath, "0600", "Authorization: Bearer "+spec.Token.String()+"\n"))
	}
	envFile, err := renderEnv(env)
	if err != nil {
		return nil, err
	}
	files = append(files, file(BootEnvPath, "0600", envFile))
	ours := map[string]any{
		"write_files": files,
		"runcmd":      []any{[]any{"sh", BootScriptPath}},
	}
	doc, err := mergeCloudConfig(ours, spec.ExtraCloudConfig)
	if err != nil {
		return nil, err
	}
	body, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding cloud-config: %w", err)
	}
	return FitUserData(append([]byte(cloudConfigHeader), body...), spec.UserDataLimit)
}

// file is one write_files entry, owned by root.
func file(path, permissions, content string) map[string]any {
	return map[string]any{"path": path, "permissions": permissions, "owner": "root:root", "content": content}
}

// envVar is one setting of the boot script.
type envVar struct{ name, value string }

// renderEnv writes the boot script's settings as shell assignments, each value single-quoted.
func renderEnv(vars []envVar) (string, error) {
	var b strings.Builder
	b.WriteString("# The fulfiller's settings of this machine's boot script (boot.sh).\n")
	for _, v := range vars {
		if strings.ContainsAny(v.value, "'\n") {
			return "", fmt.Errorf("boot setting %s may not hold a quote or a newline", v.name)
		}
		fmt.Fprintf(&b, "%s='%s'\n", v.name, v.value)
	}
	return b.String(), nil
}

// mergeCloudConfig merges the user's #cloud-config into ours: write_files after ours (the
// user may not write our files), runcmd before ours (so it can prepare the machine before
// `kubeadm join`), every other key as the user wrote it. Keys of ours other than those two
// are not the user's to set.
func mergeCloudConfig(ours map[string]any, extra string) (map[string]any, error) {
	if strings.TrimSpace(extra) == "" {
		return ours, nil
	}
	if first, _, _ := strings.Cut(strings.TrimLeft(extra, "\n"), "\n"); strings.HasPrefix(first, "#") && strings.TrimSpace(first) != "#cloud-config" {
		return nil, fmt.Errorf("%w: it must be a #cloud-config document, not %q", ErrInvalidCloudConfig, first)
	}
	user := map[string]any{}
	if err := yaml.Unmarshal([]byte(extra), &user); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCloudConfig, err)
	}
	out := map[string]any{}
	for k, v := range ours {
		out[k] = v
	}
	for k, v := range user {
		switch k {
		case "write_files":
			files, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%w: write_files must be a list", ErrInvalidCloudConfig)
			}
			for _, f := range files {
				if m, ok := f.(map[string]any); ok {
					if p, _ := m["path"].(string); slices.Contains(ourPaths, path.Clean(p)) {
						return nil, fmt.Errorf("%w: write_files may not write %s, one of the fulfiller's files", ErrInvalidCloudConfig, p)
					}
				}
			}
			out[k] = append(append([]any{}, ours[k].([]any)...), files...)
		case "runcmd":
			cmds, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%w: runcmd must be a list", ErrInvalidCloudConfig)
			}
			out[k] = append(append([]any{}, cmds...), ours[k].([]any)...)
		default:
			if _, taken := ours[k]; taken {
				return nil, fmt.Errorf("%w: %s is set by the fulfiller", ErrInvalidCloudConfig, k)
			}
			out[k] = v
		}
	}
	return out, nil
}

// ValidateExtraCloudConfig checks that a NodeClass's extra cloud-config merges into the
// fulfiller's.
func ValidateExtraCloudConfig(extra string) error {
	_, err := mergeCloudConfig(map[string]any{"write_files": []any{}, "runcmd": []any{}}, extra)
	return err
}

// FitUserData keeps data within limit bytes (0: no limit): as it is when it fits, else
// gzipped and base64-encoded (cloud-init decompresses gzip user data, and Hetzner's and
// EC2's datasources base64-decode it first), else ErrUserDataTooLarge.
func FitUserData(data []byte, limit int64) ([]byte, error) {
	if limit <= 0 || int64(len(data)) <= limit {
		return data, nil
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(data); err != nil {
		return nil, fmt.Errorf("compressing user data: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing user data: %w", err)
	}
	packed := []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
	if int64(len(packed)) > limit {
		return nil, fmt.Errorf("%w: %d bytes, %d gzipped and base64-encoded, over the node type's limit of %d bytes",
			ErrUserDataTooLarge, len(data), len(packed), limit)
	}
	return packed, nil
}

// DecodeUserData undoes FitUserData, as a machine's cloud-init does: base64 of gzip, or raw
// gzip, is decompressed; anything else is returned as it is.
func DecodeUserData(data []byte) ([]byte, error) {
	if bytes.HasPrefix(data, []byte(gzipBase64Prefix)) {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
		if err != nil {
			return nil, fmt.Errorf("decoding base64 user data: %w", err)
		}
		data = raw
	}
	if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		return data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decompressing user data: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("decompressing user data: %w", err)
	}
	return out, nil
}
