// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func testSpec(t *testing.T) JoinSpec {
	t.Helper()
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return JoinSpec{APIServerEndpoint: "127.0.0.1:6443", Token: tok, CACertHash: "sha256:abcd", NodeName: "node-a", ProviderID: "sim://node-a"}
}

// TestMergeCloudConfig: the user's write_files come after ours, the user's runcmd before
// `kubeadm join`, other keys pass through; our file and our keys are not the user's.
func TestMergeCloudConfig(t *testing.T) {
	ours := []string{JoinConfigPath, BootScriptPath, BootEnvPath}
	for _, tc := range []struct {
		name, extra string
		wantErr     string
		files       []string
		cmds        []string
		keys        []string
	}{
		{name: "none", files: ours, cmds: []string{"sh"}},
		{name: "merged", extra: "#cloud-config\nwrite_files:\n- path: /etc/motd\n  content: hi\nruncmd:\n- [modprobe, br_netfilter]\n- sysctl --system\npackages: [containerd]\n",
			files: append(append([]string{}, ours...), "/etc/motd"), cmds: []string{"modprobe", "sysctl --system", "sh"}, keys: []string{"packages"}},
		{name: "no header is fine", extra: "bootcmd:\n- echo early\n", files: ours, cmds: []string{"sh"}, keys: []string{"bootcmd"}},
		{name: "our file", extra: "write_files:\n- path: " + JoinConfigPath + "\n  content: evil\n", wantErr: "may not write"},
		{name: "our script", extra: "write_files:\n- path: /usr/local/lib/fulfiller/../fulfiller/boot.sh\n  content: evil\n", wantErr: "may not write"},
		{name: "shell script", extra: "#!/bin/sh\necho hi\n", wantErr: "must be a #cloud-config document"},
		{name: "write_files not a list", extra: "write_files: {path: /x}\n", wantErr: "write_files must be a list"},
		{name: "runcmd not a list", extra: "runcmd: reboot\n", wantErr: "runcmd must be a list"},
		{name: "not yaml", extra: "write_files: [\n", wantErr: "invalid extra cloud-config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec(t)
			spec.ExtraCloudConfig = tc.extra
			data, err := RenderUserData(spec)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalidCloudConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidCloudConfig saying %q", err, tc.wantErr)
				}
				if ValidateExtraCloudConfig(tc.extra) == nil {
					t.Errorf("ValidateExtraCloudConfig accepted %q", tc.extra)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseUserData(data); err != nil {
				t.Fatalf("merged user data does not parse back: %v", err)
			}
			doc := map[string]any{}
			if err := yaml.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			var files []string
			for _, f := range doc["write_files"].([]any) {
				files = append(files, f.(map[string]any)["path"].(string))
			}
			if strings.Join(files, ",") != strings.Join(tc.files, ",") {
				t.Errorf("write_files = %v, want %v", files, tc.files)
			}
			var cmds []string
			for _, c := range doc["runcmd"].([]any) {
				switch c := c.(type) {
				case string:
					cmds = append(cmds, c)
				case []any:
					cmds = append(cmds, c[0].(string))
				}
			}
			if strings.Join(cmds, ",") != strings.Join(tc.cmds, ",") {
				t.Errorf("runcmd = %v, want %v", cmds, tc.cmds)
			}
			for _, k := range tc.keys {
				if _, ok := doc[k]; !ok {
					t.Errorf("key %s of the extra cloud-config is lost", k)
				}
			}
		})
	}
}

// TestUserDataLimit: under the limit as it is; over it gzipped and base64-encoded, and still
// readable by the machine; still over, ErrUserDataTooLarge.
func TestUserDataLimit(t *testing.T) {
	// Repetitive content compresses well; random-looking content (the padding of a
	// certificate bundle, say) does not.
	compressible := "#cloud-config\nwrite_files:\n- path: /etc/big\n  content: |\n    " + strings.Repeat("the same line again\n    ", 2000) + "\n"
	incompressible := "#cloud-config\nwrite_files:\n- path: /etc/big\n  content: " + pseudoRandom(40000) + "\n"
	for _, tc := range []struct {
		name       string
		extra      string
		limit      int64
		compressed bool
		tooLarge   bool
	}{
		{name: "no limit", extra: compressible},
		{name: "fits", limit: 32 << 10},
		{name: "compressed to fit", extra: compressible, limit: 32 << 10, compressed: true},
		{name: "too large even compressed", extra: incompressible, limit: 32 << 10, tooLarge: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec(t)
			spec.ExtraCloudConfig, spec.UserDataLimit = tc.extra, tc.limit
			data, err := RenderUserData(spec)
			if tc.tooLarge {
				if !errors.Is(err, ErrUserDataTooLarge) || !strings.Contains(err.Error(), "limit of 32768 bytes") {
					t.Fatalf("err = %v, want ErrUserDataTooLarge naming the limit", err)
				}
				if strings.Contains(err.Error(), spec.Token.String()) {
					t.Fatal("the error carries the token")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.limit > 0 && int64(len(data)) > tc.limit {
				t.Errorf("%d bytes over the limit %d", len(data), tc.limit)
			}
			if got := !strings.HasPrefix(string(data), "#cloud-config\n"); got != tc.compressed {
				t.Errorf("compressed = %v, want %v", got, tc.compressed)
			}
			if tc.compressed && !strings.HasPrefix(string(data), gzipBase64Prefix) {
				t.Errorf("compressed user data starts %q, want base64 of gzip", data[:8])
			}
			jc, err := ParseUserData(data)
			if err != nil {
				t.Fatalf("the machine cannot read it: %v", err)
			}
			if jc.Discovery.BootstrapToken.Token != spec.Token.String() {
				t.Error("token lost in compression")
			}
		})
	}
}

func pseudoRandom(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = alphabet[x%64]
	}
	return string(b)
}
