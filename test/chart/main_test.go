// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package chart tests the helm charts charts/fulfiller and charts/fulfiller-crd with the
// pinned helm: it lints, renders and packages them, checks the rendered objects as typed
// Kubernetes objects, checks that the values schema rejects what it should and that the names
// of chart 0.1.0 still work, then installs chart 0.1.0 into a real control plane
// (internal/testenv), upgrades it to the packaged charts, runs a claim, upgrades again with the
// claim live, and asks the API server's authorizer what the controller's and the runners' ServiceAccounts may
// do. A runner's rights are also exercised for real: tofu runs a module with the kubernetes
// state backend as the runner ServiceAccount.
package chart

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

var (
	cp       *testenv.ControlPlane
	root     string // repository root
	chart    string // charts/fulfiller
	crdChart string // charts/fulfiller-crd
	// previousChart is chart 0.1.0 as `helm package` made it from main before the CRD chart
	// (the upgrade test installs it first).
	previousChart string
	helm          string
	tofu          string
	kubectl       string
)

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	root = filepath.Join(filepath.Dir(file), "..", "..")
	chart = filepath.Join(root, "charts", "fulfiller")
	crdChart = filepath.Join(root, "charts", "fulfiller-crd")
	previousChart = filepath.Join(filepath.Dir(file), "testdata", "fulfiller-0.1.0.tgz")
	tools, err := testenv.LookTools("helm", "tofu", "kubectl")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chart tests:", err)
		os.Exit(1)
	}
	helm, tofu, kubectl = tools["helm"], tools["tofu"], tools["kubectl"]
	// No CRDs: TestInstall installs them as chart 0.1.0's README said, then the CRD chart.
	code := testenv.RunMain(m, &cp, testenv.Options{})
	if packagesDir != "" {
		_ = os.RemoveAll(packagesDir)
	}
	os.Exit(code)
}

// testClusterName is the cluster name the tests render and install the chart with.
const testClusterName = "chart-test"

// helmCmd runs the pinned helm with its own folders, so nothing of the machine's helm setup
// (repositories, plugins, caches) is read or written. A template, install, upgrade or lint of
// the fulfiller chart (its folder or its package) gets settings.clusterName unless the
// arguments name a cluster (TestSchemaRejects checks that the chart requires one).
func helmCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	current := slices.ContainsFunc(args, func(a string) bool { return a == chart || a == packages.chart && a != "" })
	if len(args) > 0 && (args[0] == "template" || args[0] == "install" || args[0] == "upgrade" || args[0] == "lint") && current &&
		!slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "clusterName=") }) {
		args = append(args, "--set", "settings.clusterName="+testClusterName)
	}
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// manifest is a rendered chart: typed objects for the kinds client-go knows (and CRDs),
// unstructured ones for the rest.
type manifest struct {
	objects []k8sruntime.Object
}

var decoder = func() k8sruntime.Decoder {
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// render runs `helm template` (CRDs included) for a release "fulfiller" in namespace ns with
// extra arguments (--set ..., -f ...), and decodes every document strictly.
func render(t *testing.T, ns string, args ...string) *manifest {
	t.Helper()
	out, err := helmCmd(t, append([]string{"template", "fulfiller", chart, "--namespace", ns, "--include-crds"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func decodeManifest(out string) (*manifest, error) {
	m := &manifest{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading rendered manifest: %w", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		data, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("converting document to JSON: %w\n%s", err, doc)
		}
		obj, _, err := decoder.Decode(data, nil, nil)
		if k8sruntime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(data); err != nil {
				return nil, fmt.Errorf("decoding %s: %w", doc, err)
			}
			obj = u
		} else if err != nil {
			return nil, fmt.Errorf("decoding document strictly: %w\n%s", err, doc)
		}
		m.objects = append(m.objects, obj)
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		trimmed := bytes.TrimSpace(line)
		if !bytes.HasPrefix(trimmed, []byte("#")) && !bytes.Equal(trimmed, []byte("---")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// find returns the one object of type T named name; it fails the test otherwise.
func find[T k8sruntime.Object](t *testing.T, m *manifest, name string) T {
	t.Helper()
	var found []T
	for _, o := range m.objects {
		if typed, ok := o.(T); ok && objectName(o) == name {
			found = append(found, typed)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T named %q in the rendered chart, found %d (objects: %s)", zero, name, len(found), m.summary())
	}
	return found[0]
}

// all returns every object of type T.
func all[T k8sruntime.Object](m *manifest) []T {
	var found []T
	for _, o := range m.objects {
		if typed, ok := o.(T); ok {
			found = append(found, typed)
		}
	}
	return found
}

func objectName(o k8sruntime.Object) string {
	if acc, ok := o.(interface{ GetName() string }); ok {
		return acc.GetName()
	}
	return ""
}

func (m *manifest) summary() string {
	var parts []string
	for _, o := range m.objects {
		parts = append(parts, fmt.Sprintf("%T/%s", o, objectName(o)))
	}
	return strings.Join(parts, ", ")
}

// controller returns the rendered Deployment's controller container and an env lookup.
func controller(t *testing.T, m *manifest) (*appsv1.Deployment, *corev1.Container, map[string]corev1.EnvVar) {
	t.Helper()
	d := find[*appsv1.Deployment](t, m, "fulfiller")
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container in the Deployment, got %d", len(d.Spec.Template.Spec.Containers))
	}
	c := &d.Spec.Template.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s is set twice", e.Name)
		}
		env[e.Name] = e
	}
	return d, c, env
}

func envValue(t *testing.T, env map[string]corev1.EnvVar, name string) string {
	t.Helper()
	e, ok := env[name]
	if !ok {
		t.Fatalf("the controller has no env %s", name)
	}
	if e.ValueFrom != nil {
		t.Fatalf("env %s comes from %v, want a value", name, e.ValueFrom)
	}
	return e.Value
}

// packages are the charts as `helm package` writes them, made once for the tests that use them.
var (
	packagesDir  string
	packagesOnce sync.Once
	packagesErr  error
	packages     struct{ chart, crdChart string }
)

// packaged returns the paths of the packaged fulfiller and fulfiller-crd charts.
func packaged(t *testing.T) (chartPackage, crdChartPackage string) {
	t.Helper()
	packagesOnce.Do(func() {
		if packagesDir, packagesErr = os.MkdirTemp("", "fulfiller-chart-packages-"); packagesErr != nil {
			return
		}
		for _, c := range []struct {
			dir  string
			into *string
		}{{chart, &packages.chart}, {crdChart, &packages.crdChart}} {
			out, err := helmCmd(t, "package", c.dir, "--destination", packagesDir)
			if err != nil {
				packagesErr = err
				return
			}
			// "Successfully packaged chart and saved it to: <path>"
			_, path, ok := strings.Cut(strings.TrimSpace(out), ": ")
			if !ok {
				packagesErr = fmt.Errorf("helm package printed %q", out)
				return
			}
			*c.into = path
		}
	})
	if packagesErr != nil {
		t.Fatalf("packaging the charts: %v", packagesErr)
	}
	return packages.chart, packages.crdChart
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
