// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package crds embeds the generated CustomResourceDefinitions of the fulfiller.sh API
// (`make generate` writes them; the chart carries the same files).
package crds

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

var (
	//go:embed fulfiller.sh_tofunodeclasses.yaml
	tofuNodeClassesYAML []byte
	//go:embed fulfiller.sh_fulfillments.yaml
	fulfillmentsYAML []byte
	//go:embed fulfiller.sh_bootreports.yaml
	bootReportsYAML []byte
)

// CRDs returns new copies of the fulfiller's CustomResourceDefinitions. They are parsed when
// asked for, not when the package initialises: every process of the development binary links
// this package (runners, simulated machines), and would pay for parsing them at every start
// (docs/benchmarks.md, "What a process start costs").
func CRDs() []*apiextensionsv1.CustomResourceDefinition {
	return []*apiextensionsv1.CustomResourceDefinition{
		mustParse(tofuNodeClassesYAML),
		mustParse(fulfillmentsYAML),
		mustParse(bootReportsYAML),
	}
}

func mustParse(data []byte) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		panic(fmt.Sprintf("parsing embedded CRD: %v", err))
	}
	return crd
}
