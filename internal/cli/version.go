// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// KarpenterModule is the module of Karpenter core the binaries embed.
const KarpenterModule = "sigs.k8s.io/karpenter"

// Versions is what `version` reports: the binary's own version, Karpenter core's from the
// binary's build information, and the tofu and providers runs use, as found on this machine
// (in the image: its tofu and its provider mirror).
type Versions struct {
	Fulfiller string `json:"fulfiller"`
	Go        string `json:"go"`
	Platform  string `json:"platform"`
	Karpenter string `json:"karpenter"`
	Tofu      string `json:"tofu,omitempty"`
	TofuPath  string `json:"tofuPath,omitempty"`
	// TofuError says why no supported tofu was found.
	TofuError string `json:"tofuError,omitempty"`
	// CLIConfig is the OpenTofu CLI configuration runs get; Providers are the packages of its
	// filesystem mirrors.
	CLIConfig      string                      `json:"cliConfig,omitempty"`
	Providers      []tfrunner.MirroredProvider `json:"providers"`
	ProvidersError string                      `json:"providersError,omitempty"`
}

// version is the `version` command: `version [-json]`.
func version(binaryVersion string, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("version", flag.ContinueOnError)
	flags.SetOutput(stderr)
	asJSON := flags.Bool("json", false, "print the versions as JSON")
	if err := flags.Parse(args); err != nil || flags.NArg() > 0 {
		return 2
	}
	info, _ := debug.ReadBuildInfo()
	v := collectVersions(context.Background(), binaryVersion, info, os.Getenv)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "fulfiller %s (%s %s)\n", v.Fulfiller, v.Go, v.Platform)
	fmt.Fprintf(stdout, "karpenter core %s\n", v.Karpenter)
	if v.TofuError != "" {
		fmt.Fprintf(stdout, "tofu: %s\n", v.TofuError)
	} else {
		fmt.Fprintf(stdout, "tofu %s (%s)\n", v.Tofu, v.TofuPath)
	}
	if v.ProvidersError != "" {
		fmt.Fprintf(stdout, "providers: %s\n", v.ProvidersError)
	}
	for _, p := range v.Providers {
		fmt.Fprintf(stdout, "provider %s (%s)\n", p, p.Mirror)
	}
	return 0
}

// collectVersions gathers Versions; info is the binary's build information (nil: none). The
// tofu binary is the controller's (FULFILLER_TOFU,
// default tofu in PATH); the CLI configuration is the one runs get
// (FULFILLER_TOFU_ENV_TF_CLI_CONFIG_FILE, else TF_CLI_CONFIG_FILE).
func collectVersions(ctx context.Context, binaryVersion string, info *debug.BuildInfo, getenv func(string) string) Versions {
	v := Versions{Fulfiller: binaryVersion, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, Karpenter: "unknown", Providers: []tfrunner.MirroredProvider{}}
	if info != nil {
		for _, dep := range info.Deps {
			if dep.Path == KarpenterModule {
				v.Karpenter = dep.Version
				if dep.Replace != nil {
					v.Karpenter = dep.Replace.Path + " " + dep.Replace.Version
				}
			}
		}
	}
	tofu := getenv("FULFILLER_TOFU")
	if tofu == "" {
		tofu = "tofu"
	}
	if path, tv, err := tfrunner.FindTofu(ctx, tofu); err != nil {
		v.TofuError = err.Error()
	} else {
		v.Tofu, v.TofuPath = tv.String(), path
	}
	v.CLIConfig = getenv(tfrunner.TofuEnvPrefix + "TF_CLI_CONFIG_FILE")
	if v.CLIConfig == "" {
		v.CLIConfig = getenv("TF_CLI_CONFIG_FILE")
	}
	if v.CLIConfig == "" {
		v.ProvidersError = "no CLI configuration (TF_CLI_CONFIG_FILE), so no provider mirror"
		return v
	}
	mirrors, err := tfrunner.FilesystemMirrors(v.CLIConfig)
	if err != nil {
		v.ProvidersError = err.Error()
		return v
	}
	for _, m := range mirrors {
		found, err := tfrunner.ListMirror(m)
		if err != nil {
			v.ProvidersError = err.Error()
			continue
		}
		v.Providers = append(v.Providers, found...)
	}
	return v
}
