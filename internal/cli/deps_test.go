// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the project's module path.
const module = "github.com/fulfiller-sh/fulfiller"

// devOnly are the project's packages, with their subpackages, that only the development binary
// and the tests may link: the test helpers and the stand-in kubelet (internal/testenv/...), the
// control-plane launcher, the local environment and the simulated machine.
var devOnly = []string{
	module + "/internal/testenv",
	module + "/internal/controlplane",
	module + "/internal/devenv",
	module + "/internal/sim",
}

// testElements mark a project package as test machinery wherever it is, such as a cloud API
// stand-in beside its family's package; so does an element ending in "test".
var testElements = []string{"fake", "fakes", "sim", "standin", "stub", "testing", "testutil"}

// pkg is one package of a binary and what it imports.
type pkg struct {
	path    string
	imports []string
}

// testMachinery returns the packages of deps a controller binary must not link, each with the
// packages that import it: the standard library's testing packages (whoever imports them) and
// the project's development and test packages. Other modules' packages named for tests, such
// as k8s.io/client-go/testing (client-go's generic typed client imports it; it does not import
// package testing), are theirs to answer for and are not reported.
func testMachinery(deps []pkg) []string {
	importers := map[string][]string{}
	for _, p := range deps {
		for _, imp := range p.imports {
			importers[imp] = append(importers[imp], p.path)
		}
	}
	var bad []string
	for _, p := range deps {
		switch by := importers[p.path]; {
		case !forbidden(p.path):
		case len(by) == 0:
			bad = append(bad, p.path)
		default:
			bad = append(bad, p.path+" (imported by "+strings.Join(by, ", ")+")")
		}
	}
	return bad
}

func forbidden(path string) bool {
	if path == "testing" || strings.HasPrefix(path, "testing/") || path == "net/http/httptest" {
		return true
	}
	if path != module && !strings.HasPrefix(path, module+"/") {
		return false
	}
	for _, d := range devOnly {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	for _, e := range strings.Split(strings.TrimPrefix(path, module+"/"), "/") {
		if slices.Contains(testElements, e) || strings.HasSuffix(e, "test") {
			return true
		}
	}
	return false
}

// goListDeps lists the packages a main package links, with their imports.
func goListDeps(t *testing.T, main string) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", main).Output()
	if err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			t.Fatalf("go list -deps %s: %v\n%s", main, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", main, err)
	}
	var deps []pkg
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) > 0 {
			deps = append(deps, pkg{path: fields[0], imports: fields[1:]})
		}
	}
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", main)
	}
	return deps
}

// The image's binary carries no test machinery; the development binary carries the local
// environment, the stand-in kubelet and the simulated machine, which shows the check finds them.
func TestControllerBinaryLinksNoTestMachinery(t *testing.T) {
	if bad := testMachinery(goListDeps(t, module+"/cmd/fulfiller")); len(bad) > 0 {
		t.Errorf("cmd/fulfiller links test machinery:\n  %s", strings.Join(bad, "\n  "))
	}
	dev := testMachinery(goListDeps(t, module+"/cmd/fulfiller-dev"))
	for _, want := range []string{"/internal/testenv/kubelet", "/internal/controlplane", "/internal/devenv", "/internal/sim"} {
		if !slices.ContainsFunc(dev, func(b string) bool { return strings.HasPrefix(b, module+want+" (imported by ") }) {
			t.Errorf("the check does not find %s in cmd/fulfiller-dev, which links it; it found:\n  %s", module+want, strings.Join(dev, "\n  "))
		}
	}
}

func TestTestMachinery(t *testing.T) {
	deps := []pkg{
		{path: module + "/cmd/fulfiller", imports: []string{module + "/internal/cli", module + "/internal/providers/hcloud/fake"}},
		{path: module + "/internal/cli", imports: []string{module + "/internal/claims", "k8s.io/client-go/gentype"}},
		{path: module + "/internal/claims", imports: []string{"testing", "os"}},
		{path: module + "/internal/providers/hcloud/fake", imports: []string{module + "/internal/claimstest"}},
		{path: module + "/internal/claimstest"},
		{path: module + "/internal/simulation"},
		{path: "k8s.io/client-go/gentype", imports: []string{"k8s.io/client-go/testing"}},
		{path: "k8s.io/client-go/testing"},
		{path: "os", imports: []string{"internal/testlog"}},
		{path: "internal/testlog"},
		{path: "testing"},
		{path: "testing/fstest"},
		{path: "net/http/httptest"},
		{path: module + "/internal/testenv/kubelet"},
		{path: module + "/internal/testenvelope"},
	}
	want := []string{
		module + "/internal/providers/hcloud/fake (imported by " + module + "/cmd/fulfiller)",
		module + "/internal/claimstest (imported by " + module + "/internal/providers/hcloud/fake)",
		"testing (imported by " + module + "/internal/claims)",
		"testing/fstest",
		"net/http/httptest",
		module + "/internal/testenv/kubelet",
	}
	if got := testMachinery(deps); !slices.Equal(got, want) {
		t.Errorf("testMachinery =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// linked are the packages main links that match.
func linked(t *testing.T, main string, match func(path string) bool) []string {
	t.Helper()
	var found []string
	for _, p := range goListDeps(t, main) {
		if match(p.path) {
			found = append(found, p.path)
		}
	}
	return found
}

// The runner binary (cmd/fulfiller-runner) links no Kubernetes client, no Karpenter and not
// the API types, and the machine binary (cmd/fulfiller-sim) neither Karpenter nor the
// controller's packages: that is what makes a run and a simulated machine start in a
// fraction of the CPU of the binaries that link the controller. The same checks find those
// packages in cmd/fulfiller and cmd/fulfiller-dev.
func TestSmallBinariesLinkNoController(t *testing.T) {
	kubernetes := func(path string) bool {
		return strings.HasPrefix(path, "k8s.io/") || strings.HasPrefix(path, "sigs.k8s.io/") || strings.HasPrefix(path, module+"/api/")
	}
	controller := func(path string) bool {
		return strings.HasPrefix(path, "sigs.k8s.io/karpenter/") || strings.HasPrefix(path, "sigs.k8s.io/controller-runtime/") ||
			path == module+"/internal/claims" || strings.HasPrefix(path, module+"/internal/claims/") || path == module+"/internal/operator"
	}
	for _, tc := range []struct {
		small, big string
		match      func(string) bool
		bigHas     []string
	}{
		{small: "/cmd/fulfiller-runner", big: "/cmd/fulfiller", match: kubernetes,
			bigHas: []string{"k8s.io/client-go/kubernetes", "sigs.k8s.io/karpenter/pkg/operator", module + "/api/v1alpha1"}},
		{small: "/cmd/fulfiller-sim", big: "/cmd/fulfiller-dev", match: controller,
			bigHas: []string{"sigs.k8s.io/karpenter/pkg/operator", "sigs.k8s.io/controller-runtime/pkg/manager", module + "/internal/claims"}},
	} {
		if found := linked(t, module+tc.small, tc.match); len(found) > 0 {
			t.Errorf("%s links %d packages it must not:\n  %s", tc.small, len(found), strings.Join(found, "\n  "))
		}
		big := linked(t, module+tc.big, tc.match)
		for _, want := range tc.bigHas {
			if !slices.Contains(big, want) {
				t.Errorf("the check does not find %s in %s, which links it", want, tc.big)
			}
		}
	}
}
