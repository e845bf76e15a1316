// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package crds embeds the CustomResourceDefinitions of KubeVirt (VirtualMachine,
// VirtualMachineInstance, from kubevirt.io/api) and CDI (DataVolume, from
// kubevirt.io/containerized-data-importer-api) at the versions in go.mod, generated from
// their typed Go API by `make generate` (see gen/main.go). Tests install them into a
// control plane through testenv.Options.CRDs, next to testenv.DefaultCRDs().
package crds

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

var (
	//go:embed kubevirt.io_virtualmachines.yaml
	virtualMachinesYAML []byte
	//go:embed kubevirt.io_virtualmachineinstances.yaml
	virtualMachineInstancesYAML []byte
	//go:embed cdi.kubevirt.io_datavolumes.yaml
	dataVolumesYAML []byte
)

// CRDs returns new copies of the VirtualMachine, VirtualMachineInstance and DataVolume CRDs.
func CRDs() []*apiextensionsv1.CustomResourceDefinition {
	return []*apiextensionsv1.CustomResourceDefinition{
		mustParse(virtualMachinesYAML),
		mustParse(virtualMachineInstancesYAML),
		mustParse(dataVolumesYAML),
	}
}

func mustParse(data []byte) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		panic(fmt.Sprintf("parsing embedded CRD: %v", err))
	}
	return crd
}
