// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package keys holds the label keys the fulfiller's parts share: the controller sets them on
// what it makes for a claim, the executors on a claim's runs, and the shipped modules on the
// machines they create (modules/*: a family's inventory finds a machine by them, and the
// orphan collector never touches one without this cluster's label). It imports nothing, so
// that the runner binary, which links no Kubernetes package, shares them.
package keys

// Labels of what belongs to a claim. The claim and its NodePool use Karpenter's keys.
const (
	// LabelNodeClaim names the claim: its token and user data Secrets, its runs (runner Jobs,
	// their pods and request Secrets), its machine.
	LabelNodeClaim = "karpenter.sh/nodeclaim"
	// LabelNodeClaimUID is the claim's UID, on its runs and its state's Secret and Lease: what
	// an earlier claim of the same name left is never taken for this one's.
	LabelNodeClaimUID = "fulfiller.sh/nodeclaim-uid"
	// LabelNodePool names the claim's NodePool, on its machine.
	LabelNodePool = "karpenter.sh/nodepool"
	// LabelNodeClass names the claim's TofuNodeClass, on its machine.
	LabelNodeClass = "fulfiller.sh/nodeclass"
	// LabelCluster is this cluster's name (the controller's FULFILLER_CLUSTER_NAME), on every
	// machine.
	LabelCluster = "fulfiller.sh/cluster"
	// LabelOperation is a run's operation (apply or destroy).
	LabelOperation = "fulfiller.sh/operation"
)

// LabelManagedBy, with the value ManagedBy, marks what the fulfiller made: the Job executor
// counts its runs by it, and only the token Secrets it marks are ever revoked or collected,
// never a token someone else labelled with a claim's name.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "fulfiller"
)

// AnnotationScaleDownHeld marks a Node's karpenter.sh/do-not-disrupt annotation as the
// fulfiller's: set beside it while a class's billing-aware scale-down keeps the empty node
// (its value is when the hold ends, RFC 3339), removed with it. A do-not-disrupt annotation
// without it is someone else's and is never changed.
const AnnotationScaleDownHeld = "fulfiller.sh/scale-down-held"
