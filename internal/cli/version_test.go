// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
)

// TestVersions reports the binary's, Karpenter core's (from the build information), the
// pinned tofu's and the tools' mirrored providers' versions.
func TestVersions(t *testing.T) {
	tofu, err := controlplane.Tool("tofu")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := controlplane.TofuRC()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FULFILLER_TOFU": tofu, "TF_CLI_CONFIG_FILE": rc}
	info := &debug.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.36.1"}, {Path: KarpenterModule, Version: "v1.15.0"}}}
	v := collectVersions(context.Background(), "1.2.3", info, func(k string) string { return env[k] })
	if v.Fulfiller != "1.2.3" || v.Karpenter != "v1.15.0" || v.Tofu != "1.12.6" || v.TofuPath != tofu || v.TofuError != "" {
		t.Errorf("versions = %+v, want fulfiller 1.2.3, karpenter v1.15.0, tofu 1.12.6 at %s", v, tofu)
	}
	var got []string
	for _, p := range v.Providers {
		got = append(got, p.Source+" "+p.Version)
	}
	for _, want := range []string{"registry.opentofu.org/hetznercloud/hcloud 1.58.0", "registry.opentofu.org/gavinbunney/kubectl 1.19.0"} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("providers %q lack %s", got, want)
		}
	}

	env = map[string]string{"FULFILLER_TOFU": "/nonexistent/tofu"}
	v = collectVersions(context.Background(), "1.2.3", nil, func(k string) string { return env[k] })
	if v.Karpenter != "unknown" || !strings.Contains(v.TofuError, "/nonexistent/tofu") || v.ProvidersError == "" {
		t.Errorf("without tofu and CLI configuration: %+v, want both errors", v)
	}
	var out, errOut bytes.Buffer
	if code := version("1.2.3", []string{"-json"}, &out, &errOut); code != 0 {
		t.Fatalf("version -json: exit %d: %s", code, errOut.String())
	}
	var decoded Versions
	if err := json.Unmarshal(out.Bytes(), &decoded); err != nil || decoded.Fulfiller != "1.2.3" {
		t.Errorf("version -json printed %s (%v)", out.String(), err)
	}
}
