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

// Labels every shipped module puts on the machines it creates (as cloud labels where the
// cloud has them), passed to it in the module contract's labels: the cluster's name (the
// controller's FULFILLER_CLUSTER_NAME), the claim, the class and the NodePool. A family's
// inventory attributes a machine to this cluster by them; the orphan collector never touches
// a machine without this cluster's label.
const (
	LabelCluster   = Group + "/cluster"
	LabelNodeClass = Group + "/nodeclass"
	// The claim and the NodePool use Karpenter's label keys.
	LabelNodeClaim = "karpenter.sh/nodeclaim"
	LabelNodePool  = "karpenter.sh/nodepool"
)

// CPU kinds of a catalogue's node types (spec.catalog.select[].cpu).
const (
	CPUShared    = "shared"
	CPUDedicated = "dedicated"
)
