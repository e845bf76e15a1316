// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRequestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "request.json")
	req := Request{
		Name:        "claim-a-apply-1",
		Operation:   Apply,
		ModuleDir:   "/modules/sim",
		WorkDir:     dir,
		Backend:     Backend{Type: "kubernetes", Config: map[string]string{"secret_suffix": "claim-a"}},
		Workspace:   "claim-a",
		Variables:   map[string]any{"node_name": "claim-a", "user_data": "secret", "labels": map[string]any{"a": "b"}},
		Env:         map[string]string{"KUBECONFIG": "/k"},
		TofuPath:    "/bin/tofu",
		LockTimeout: 30 * time.Second,
	}
	if err := WriteRequest(path, req); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("request file mode = %v, want 0600", info.Mode().Perm())
	}
	got, err := ReadRequest(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Errorf("read %+v, want %+v", got, req)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}

	res := Result{Operation: Apply, Error: &RunError{Class: LockHeld, Message: "held"}, Started: time.Now().UTC().Truncate(time.Second)}
	rpath := filepath.Join(dir, "result.json")
	if err := WriteResult(rpath, res); err != nil {
		t.Fatal(err)
	}
	gotRes, err := ReadResult(rpath)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotRes, res) {
		t.Errorf("read %+v, want %+v", gotRes, res)
	}
}

func TestRequestValidate(t *testing.T) {
	valid := Request{Name: "a-apply-1", Operation: Apply, ModuleDir: "m", WorkDir: "w", TofuPath: "t"}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid request: %v", err)
	}
	for name, mutate := range map[string]func(*Request){
		"upper case name":   func(r *Request) { r.Name = "A-apply" },
		"leading dash":      func(r *Request) { r.Name = "-a" },
		"trailing dash":     func(r *Request) { r.Name = "a-" },
		"long name":         func(r *Request) { r.Name = strings.Repeat("a", 64) },
		"dot in name":       func(r *Request) { r.Name = "a.b" },
		"operation":         func(r *Request) { r.Operation = "plan" },
		"no module":         func(r *Request) { r.ModuleDir = "" },
		"no tofu":           func(r *Request) { r.TofuPath = "" },
		"backend injection": func(r *Request) { r.Backend.Type = `local" {}` },
		"negative timeout":  func(r *Request) { r.LockTimeout = -time.Second },
		"workspace path":    func(r *Request) { r.Workspace = "../claim" },
	} {
		r := valid
		mutate(&r)
		if err := r.Validate(); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidRequest", name, err)
		}
	}
}
