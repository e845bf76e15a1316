// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ToolsBinEnv names the folder that holds the binaries hack/tools.sh builds.
const ToolsBinEnv = "FULFILLER_TOOLS_BIN"

// ToolsBin returns the folder of the pinned tools: $FULFILLER_TOOLS_BIN, or the default
// cache folder hack/tools.sh links them into.
func ToolsBin() string {
	if dir := os.Getenv(ToolsBinEnv); dir != "" {
		return dir
	}
	cache := os.Getenv("FULFILLER_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		cache = filepath.Join(home, ".cache", "fulfiller")
	}
	return filepath.Join(cache, "tools", "bin")
}

// TofuRC is the tofu CLI configuration hack/tools.sh writes next to the tools' bin folder:
// providers (hcloud, kubectl) are installed from the tools' filesystem mirror only. It
// returns an error that says how to build it when it is missing.
func TofuRC() (string, error) {
	rc := filepath.Join(filepath.Dir(ToolsBin()), "tofurc")
	if _, err := os.Stat(rc); err != nil {
		return "", fmt.Errorf("the tofu CLI configuration %s (the providers' mirror) is missing: run `make tools`", rc)
	}
	return rc, nil
}

// Tool returns the path of one pinned tool, or an error that says how to build it.
func Tool(name string) (string, error) {
	path := filepath.Join(ToolsBin(), name)
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("tool %s not found at %s: run `make tools` (or set %s)", name, path, ToolsBinEnv)
	}
	return path, nil
}

// LookTools checks that every named tool is present and runnable.
func LookTools(names ...string) (map[string]string, error) {
	paths := make(map[string]string, len(names))
	for _, name := range names {
		path, err := Tool(name)
		if err != nil {
			return nil, err
		}
		if _, err := exec.LookPath(path); err != nil {
			return nil, fmt.Errorf("tool %s at %s is not runnable: %w", name, path, err)
		}
		paths[name] = path
	}
	return paths, nil
}
