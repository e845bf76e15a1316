// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckModuleDirReportsEveryViolation compares the check of a module that breaks the
// contract in every known way with testdata/contract/broken-contract.txt.
func TestCheckModuleDirReportsEveryViolation(t *testing.T) {
	vs, err := CheckModuleDir(moduleDir(t, "broken-contract"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "contract", "broken-contract.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, v := range vs {
		got.WriteString(v.String() + "\n")
	}
	if got.String() != string(want) {
		t.Errorf("violations:\n%s\nwant (testdata/contract/broken-contract.txt):\n%s", got.String(), want)
	}
	if err := ViolationsError(vs); !errors.Is(err, ErrInvalidModule) {
		t.Errorf("ViolationsError = %v, want ErrInvalidModule", err)
	}
}

// TestCheckModuleDirPassesShippedModules runs the check on every module under modules/, the
// template included, and on the test modules that keep the contract.
func TestCheckModuleDirPassesShippedModules(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "modules", "*", "outputs.tf"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, filepath.Base(filepath.Dir(d)))
	}
	for _, name := range []string{"hetzner-cloud", "hetzner-robot", "kubevirt", "sim", "template"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+name+" ") {
			t.Errorf("modules/%s/outputs.tf is missing (found %v)", name, names)
		}
	}
	dirs = dirs[:0]
	for _, name := range names {
		dirs = append(dirs, filepath.Join("..", "..", "modules", name))
	}
	dirs = append(dirs, moduleDir(t, "node"), moduleDir(t, "tofu-files"))
	for _, dir := range dirs {
		vs, err := CheckModuleDir(dir)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		for _, v := range vs {
			t.Errorf("%s: %s", dir, v)
		}
	}
}

func TestCheckModuleDirErrors(t *testing.T) {
	_, err := CheckModuleDir(moduleDir(t, "syntax-error"))
	if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "main.tf:") {
		t.Errorf("syntax error: %v, want ErrInvalidModule with file and line", err)
	}
	if _, err := CheckModuleDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrInvalidModule) {
		t.Errorf("missing folder: %v, want ErrInvalidModule", err)
	}
}
