// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

// Node-type families, the values of TofuNodeClass spec.family. Each is implemented in
// internal/providers/<family>; the generic code never branches on these names.
const (
	FamilySim      = "sim"
	FamilyHcloud   = "hcloud"
	FamilyKubeVirt = "kubevirt"
	FamilyRobot    = "robot"
)

// CPU kinds of a catalogue's node types (spec.catalog.select[].cpu).
const (
	CPUShared    = "shared"
	CPUDedicated = "dedicated"
)
