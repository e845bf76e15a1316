// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// root is this package; its rooms are the packages under it.
const root = "github.com/fulfiller-sh/fulfiller/internal/claims"

// shared is the room every room may import: what all of them read of a class.
const shared = root + "/classconfig"

// pure are rooms of decisions only: they read and write nothing, so they link no client.
var pure = []string{root + "/fulfillment/gates"}

// pkg is one package and what it imports.
type pkg struct {
	path    string
	imports []string
}

// violations returns the imports of pkgs that break the rooms' rule: a room imports no
// sibling, only the shared room and its own sub-rooms (the fulfillment controller its gates
// and its run driver); the shared room imports no room; only this package, which wires them,
// imports them all; a pure room links no controller-runtime.
func violations(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		for _, imp := range p.imports {
			if slices.Contains(pure, p.path) && strings.HasPrefix(imp, "sigs.k8s.io/controller-runtime") {
				bad = append(bad, p.path+" imports "+imp+": it decides, it does not read or write")
			}
			if imp != root && !strings.HasPrefix(imp, root+"/") || p.path == root {
				continue
			}
			switch {
			case imp == root:
				bad = append(bad, p.path+" imports "+imp+", which wires the rooms")
			case p.path == shared:
				bad = append(bad, p.path+" imports "+imp+": the shared room imports no room")
			case imp == shared || strings.HasPrefix(imp, p.path+"/"):
			default:
				bad = append(bad, p.path+" imports another room "+imp)
			}
		}
	}
	return bad
}

// goList lists the packages under this one with what they import (not their tests').
func goList(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", root+"/...").Output()
	if err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			t.Fatalf("go list %s/...: %v\n%s", root, err, ee.Stderr)
		}
		t.Fatalf("go list %s/...: %v", root, err)
	}
	var pkgs []pkg
	for line := range strings.Lines(string(out)) {
		if fields := strings.Fields(line); len(fields) > 0 {
			pkgs = append(pkgs, pkg{path: fields[0], imports: fields[1:]})
		}
	}
	return pkgs
}

// The rooms of internal/claims import no sibling (the compiler already refuses cycles). The
// rule holds for what the binary links; a test may call a sibling room to check the two
// together.
func TestRoomsImportNoSibling(t *testing.T) {
	pkgs := goList(t)
	for _, want := range []string{shared, root + "/cloudprovider", root + "/fulfillment", root + "/fulfillment/run", root + "/nodeclass",
		root + "/garbagecollection", root + "/pool", root + "/scaledown"} {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.path == want }) {
			t.Errorf("go list does not list %s", want)
		}
	}
	if bad := violations(pkgs); len(bad) > 0 {
		t.Errorf("the rooms' imports break the rule:\n  %s", strings.Join(bad, "\n  "))
	}
}

func TestViolations(t *testing.T) {
	pkgs := []pkg{
		{path: root, imports: []string{root + "/fulfillment", root + "/cloudprovider"}},
		{path: root + "/fulfillment", imports: []string{shared, root + "/fulfillment/run", root + "/cloudprovider"}},
		{path: root + "/fulfillment/run", imports: []string{shared, root + "/fulfillment"}},
		{path: root + "/fulfillment/gates", imports: []string{"sigs.k8s.io/controller-runtime/pkg/client"}},
		{path: root + "/nodeclass", imports: []string{shared, root}},
		{path: shared, imports: []string{root + "/pool", "github.com/fulfiller-sh/fulfiller/internal/family"}},
	}
	want := []string{
		root + "/fulfillment imports another room " + root + "/cloudprovider",
		root + "/fulfillment/run imports another room " + root + "/fulfillment",
		root + "/fulfillment/gates imports sigs.k8s.io/controller-runtime/pkg/client: it decides, it does not read or write",
		root + "/nodeclass imports " + root + ", which wires the rooms",
		shared + " imports " + root + "/pool: the shared room imports no room",
	}
	if got := violations(pkgs); !slices.Equal(got, want) {
		t.Errorf("violations =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
