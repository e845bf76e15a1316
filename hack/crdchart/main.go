// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Command crdchart writes the CRDs of the fulfiller-crd chart into its templates folder:
// the fulfiller's (api/crds, -fulfiller) and those of the Karpenter core the binary embeds
// (the module version of go.mod, read from sigs.k8s.io/karpenter/pkg/apis, -karpenter).
// `make chart-crds` and `make karpenter-crds` run it, and `make verify-generate` fails when
// the committed files differ from what it writes.
//
// Each file is the source CRD byte for byte, with three annotations added to its metadata:
// the chart's additionalAnnotations, helm.sh/resource-policy: keep (deleting a CRD deletes
// every object of its kind: `helm uninstall` must never do that) and, on Karpenter's, the
// version of Karpenter core it comes from (fulfiller.sh/karpenter-core-version). The files are
// templates, so that `helm upgrade` updates the CRDs (helm never updates those in a chart's
// crds/ folder); a source with template delimiters in it is refused.
//
// Usage: go run ./hack/crdchart -out DIR [-fulfiller DIR] [-karpenter -karpenter-version VERSION]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"
	"sigs.k8s.io/yaml"
)

// The annotations' names (internal/operator reads the version one).
const (
	resourcePolicy       = "helm.sh/resource-policy"
	karpenterCoreVersion = "fulfiller.sh/karpenter-core-version"
)

// header is how controller-gen starts a CRD; the annotations go after its last line.
const header = "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  annotations:\n"

func main() {
	out := flag.String("out", "", "the chart's templates folder")
	fulfiller := flag.String("fulfiller", "", "folder of the fulfiller's generated CRDs (api/crds)")
	karpenter := flag.Bool("karpenter", false, "write the embedded Karpenter core's CRDs")
	karpenterVersion := flag.String("karpenter-version", "", "the Karpenter core version of go.mod (with -karpenter)")
	flag.Parse()
	if err := run(*out, *fulfiller, *karpenter, *karpenterVersion); err != nil {
		fmt.Fprintln(os.Stderr, "crdchart:", err)
		os.Exit(1)
	}
}

func run(out, fulfiller string, karpenter bool, karpenterVersion string) error {
	if out == "" || fulfiller == "" && !karpenter {
		return errors.New("usage: crdchart -out DIR [-fulfiller DIR] [-karpenter -karpenter-version VERSION]")
	}
	if fulfiller != "" {
		sources, err := filepath.Glob(filepath.Join(fulfiller, "*.yaml"))
		if err != nil || len(sources) == 0 {
			return fmt.Errorf("no CRDs in %s", fulfiller)
		}
		files := map[string][]byte{}
		for _, src := range sources {
			data, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			files[filepath.Base(src)] = data
		}
		if err := write(out, "fulfiller.sh_", files, "api/crds (controller-gen: make generate)", "make chart-crds", nil); err != nil {
			return err
		}
	}
	if karpenter {
		if !strings.HasPrefix(karpenterVersion, "v") {
			return fmt.Errorf("-karpenter needs -karpenter-version, the version of sigs.k8s.io/karpenter in go.mod (got %q)", karpenterVersion)
		}
		files := map[string][]byte{}
		for _, data := range [][]byte{karpenterapis.NodePoolCRD, karpenterapis.NodeClaimCRD, karpenterapis.NodeOverlayCRD, karpenterapis.CapacityBufferCRD} {
			name, err := fileName(data)
			if err != nil {
				return err
			}
			files[name] = data
		}
		origin := "sigs.k8s.io/karpenter@" + karpenterVersion + " pkg/apis/crds"
		extra := []string{karpenterCoreVersion + ": " + karpenterVersion}
		for _, prefix := range []string{"karpenter.sh_", "autoscaling.x-k8s.io_"} {
			if err := write(out, prefix, filterPrefix(files, prefix), origin, "make karpenter-crds", extra); err != nil {
				return err
			}
		}
	}
	return nil
}

// write replaces the files in out whose name starts with prefix by files, as templates.
func write(out, prefix string, files map[string][]byte, origin, target string, extra []string) error {
	stale, err := filepath.Glob(filepath.Join(out, prefix+"*.yaml"))
	if err != nil {
		return err
	}
	for _, path := range stale {
		if _, keep := files[filepath.Base(path)]; !keep {
			if err := os.Remove(path); err != nil {
				return err
			}
		}
	}
	for name, data := range files {
		tmpl, err := template(data, origin, target, extra)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(out, name), tmpl, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// template is a CRD as a template of the chart: a comment naming its origin, then the CRD
// with the chart's annotations before its own.
func template(crd []byte, origin, target string, extra []string) ([]byte, error) {
	if !bytes.HasPrefix(crd, []byte(header)) {
		return nil, errors.New("does not start as controller-gen writes a CRD (metadata.annotations first)")
	}
	if bytes.Contains(crd, []byte("{{")) || bytes.Contains(crd, []byte("}}")) {
		return nil, errors.New("holds template delimiters ({{ or }}), which helm would read as a template")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# The CRD of %s with the chart's annotations, written by hack/crdchart (%s): do not edit.\n", origin, target)
	b.WriteString(header)
	b.WriteString("    {{- with .Values.additionalAnnotations }}\n    {{- toYaml . | nindent 4 }}\n    {{- end }}\n")
	b.WriteString("    " + resourcePolicy + ": keep\n")
	for _, a := range extra {
		b.WriteString("    " + a + "\n")
	}
	b.Write(crd[len(header):])
	return b.Bytes(), nil
}

// fileName is controller-gen's name of a CRD's file: <group>_<plural>.yaml.
func fileName(data []byte) (string, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		return "", fmt.Errorf("parsing an embedded Karpenter CRD: %w", err)
	}
	return crd.Spec.Group + "_" + crd.Spec.Names.Plural + ".yaml", nil
}

func filterPrefix(files map[string][]byte, prefix string) map[string][]byte {
	out := map[string][]byte{}
	for name, data := range files {
		if strings.HasPrefix(name, prefix) {
			out[name] = data
		}
	}
	return out
}
