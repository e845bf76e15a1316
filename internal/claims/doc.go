// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package claims is the fulfiller's Karpenter CloudProvider and the controllers behind it,
// one room each, as Karpenter's pkg/controllers and the AWS provider's pkg/controllers and
// pkg/cloudprovider are laid out:
//
//   - cloudprovider: Karpenter's seam (Create decides and records the Fulfillment; Get, List,
//     Delete, IsDrifted), the instance types of a class with their offerings, and the drift
//     hash.
//   - fulfillment: the Fulfillment controller, one file per stage (bootstrap token, apply,
//     machine, join, readiness gates, initialization, destroy), with its pure gate decisions
//     (fulfillment/gates) and its run driver (fulfillment/run).
//   - nodeclass: the TofuNodeClass status controller, one file per check that does I/O, and
//     the class's finalizer.
//   - garbagecollection: the collectors of what outlived its claim.
//   - pool: the keeper of the classes whose family leases machines from a finite pool.
//   - scaledown: the billing-aware scale-down, which holds an empty node Karpenter would
//     consolidate until its paid period ends (its pure decision is internal/billing's).
//   - classconfig: what all of them read of a class, and the keys of what they make.
//
// No room imports a sibling; all may import classconfig (imports_test.go holds the rule).
// This package wires them: NewCloudProvider and NewControllers, the one list of the
// fulfiller's controllers beside Karpenter's.
package claims
