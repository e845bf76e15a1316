// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The image cannot be built here (no container engine). These tests check what it is made
// of: every file the Dockerfile copies exists, and its provider mirror script and tofu CLI
// configuration work with the pinned tofu on the shipped modules.

// TestDockerfileSources checks that every local source of a COPY in the Dockerfile exists
// and is not excluded by .dockerignore's top-level entries.
func TestDockerfileSources(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	ignored := map[string]bool{}
	if ig, err := os.ReadFile(filepath.Join(root, ".dockerignore")); err == nil {
		for _, line := range strings.Split(string(ig), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				ignored[line] = true
			}
		}
	}
	copies := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[0] != "COPY" {
			continue
		}
		args := fields[1:]
		if strings.HasPrefix(args[0], "--from=") {
			continue // from a build stage
		}
		for _, src := range args[:len(args)-1] {
			copies++
			if src == "." {
				continue
			}
			if ignored[strings.Split(src, "/")[0]] {
				t.Errorf("COPY %s: excluded by .dockerignore", src)
			}
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("COPY %s: %v", src, err)
			}
		}
	}
	if copies == 0 {
		t.Fatal("found no COPY in the Dockerfile")
	}
	for _, script := range []string{"hack/tools.sh", "hack/image/mirror-providers.sh"} {
		info, err := os.Stat(filepath.Join(root, script))
		if err != nil || info.Mode()&0o111 == 0 {
			t.Errorf("%s must exist and be executable (the Dockerfile runs it): %v", script, err)
		}
	}
}

// TestDockerfileBuildsTheControllerBinary checks that the image's Go binary is cmd/fulfiller,
// which internal/cli's test keeps free of test machinery, and not the development binary.
func TestDockerfileBuildsTheControllerBinary(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var builds []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		for i := 0; i+1 < len(fields); i++ {
			if fields[i] == "go" && fields[i+1] == "build" {
				builds = append(builds, strings.Join(fields[i:], " "))
			}
		}
	}
	if len(builds) != 1 || !strings.HasSuffix(builds[0], " ./cmd/fulfiller") {
		t.Errorf("the Dockerfile's go builds are %q, want one, of ./cmd/fulfiller only", builds)
	}
}

// TestImageTofuConfig runs the image's provider mirror script over the shipped modules, then
// `tofu init` of each with the image's CLI configuration pointing at that mirror: the modules
// initialise from the mirror alone. A module that needs a provider the mirror lacks fails
// with the mirror in the error, not with a registry download: runners never download.
func TestImageTofuConfig(t *testing.T) {
	dir := t.TempDir()
	mirror := filepath.Join(dir, "providers")
	modules := filepath.Join(root, "modules")
	env := []string{
		"PATH=" + filepath.Dir(tofu) + ":" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(dir, "home"),
		"CHECKPOINT_DISABLE=1",
	}
	run := func(cwd string, extraEnv []string, name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = cwd
		cmd.Env = append(append([]string{}, env...), extraEnv...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// The image's build copies the providers hack/tools.sh built into the mirror first.
	tools := filepath.Join(filepath.Dir(filepath.Dir(tofu)), "providers")
	if out, err := run(root, nil, "cp", "-rL", tools, mirror); err != nil {
		t.Fatalf("copying the tools' provider mirror %s (run `make tools`): %v\n%s", tools, err, out)
	}
	if out, err := run(root, nil, filepath.Join(root, "hack", "image", "mirror-providers.sh"), modules, mirror); err != nil {
		t.Fatalf("mirror-providers.sh: %v\n%s", err, out)
	} else if !strings.Contains(out, "hetzner-cloud/: the mirror has its providers") {
		t.Errorf("mirror-providers.sh did not find the built hcloud provider in the mirror:\n%s", out)
	}
	config, err := os.ReadFile(filepath.Join(root, "hack", "image", "tofurc"))
	if err != nil {
		t.Fatal(err)
	}
	const imageMirror = `"/opt/tofu/providers"`
	if !bytes.Contains(config, []byte(imageMirror)) {
		t.Fatalf("hack/image/tofurc does not name the image's mirror %s", imageMirror)
	}
	if bytes.Contains(config, []byte("direct")) || bytes.Contains(config, []byte("plugin_cache_dir")) {
		t.Fatal("hack/image/tofurc must install from the mirror only, without a direct source or a shared plugin cache")
	}
	rc := filepath.Join(dir, "tofurc")
	writeFile(t, rc, strings.ReplaceAll(string(config), imageMirror, `"`+mirror+`"`))
	cliEnv := []string{"TF_CLI_CONFIG_FILE=" + rc}

	entries, err := os.ReadDir(modules)
	if err != nil {
		t.Fatal(err)
	}
	inited := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		work := filepath.Join(dir, "work-"+e.Name())
		if out, err := run(root, nil, "cp", "-r", filepath.Join(modules, e.Name()), work); err != nil {
			t.Fatalf("copying module %s: %v\n%s", e.Name(), err, out)
		}
		if out, err := run(work, cliEnv, tofu, "init", "-input=false", "-backend=false"); err != nil {
			t.Errorf("tofu init of module %s with the image's CLI configuration: %v\n%s", e.Name(), err, out)
		}
		inited++
	}
	if inited == 0 {
		t.Fatal("no module under modules/")
	}

	missing := filepath.Join(dir, "needs-provider")
	if err := os.MkdirAll(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(missing, "main.tf"), `
terraform {
  required_providers {
    absent = { source = "example/absent", version = "1.0.0" }
  }
}
`)
	out, err := run(missing, cliEnv, tofu, "init", "-input=false", "-backend=false", "-no-color")
	if err == nil {
		t.Fatalf("tofu init installed a provider that is not in the mirror:\n%s", out)
	}
	if !strings.Contains(out, mirror) {
		t.Errorf("the failed init does not name the mirror %s, so the CLI configuration was not used:\n%s", mirror, out)
	}
}
