// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kubevirt is the KubeVirt node-type family: node types whose machines are
// kubevirt.io/v1 VirtualMachines on an infra cluster, created by modules/kubevirt with the
// gavinbunney/kubectl provider. Its tests run that module for real, through the runner,
// against a real API server holding KubeVirt's CRDs, with the simulated virt controller of
// package standin booting each VM as a simulated machine.
package kubevirt
