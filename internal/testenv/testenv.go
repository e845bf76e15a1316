// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package testenv is what test suites use to run against a real control plane: a control
// plane per package (RunMain) or per test (StartT), a PostgreSQL server per test (PostgresT),
// bootstrap tokens (MintToken) and a log tests read while it is written (SyncBuffer). The
// control plane itself is internal/controlplane, which the local environment uses as well;
// the names below forward to it, so that tests need only this package. It imports testing,
// so nothing that ships in the controller binary may import it.
package testenv

import (
	"context"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
)

type (
	// ControlPlane is a running control plane (controlplane.ControlPlane).
	ControlPlane = controlplane.ControlPlane
	// Options configure a control plane (controlplane.Options).
	Options = controlplane.Options
)

const (
	// ToolsBinEnv names the folder that holds the pinned tools (controlplane.ToolsBinEnv).
	ToolsBinEnv = controlplane.ToolsBinEnv
	// BootstrapperGroup is kubeadm's group of node bootstrap tokens.
	BootstrapperGroup = controlplane.BootstrapperGroup
)

// Start starts a control plane (controlplane.Start); StartT and RunMain stop it for you.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	return controlplane.Start(ctx, opts)
}

// DefaultCRDs are Karpenter's and the fulfiller's CRDs (controlplane.DefaultCRDs).
func DefaultCRDs() []*apiextensionsv1.CustomResourceDefinition { return controlplane.DefaultCRDs() }

// FreePorts reserves n loopback ports (controlplane.FreePorts).
func FreePorts(n int) ([]int, error) { return controlplane.FreePorts(n) }

// ToolsBin is the folder of the pinned tools (controlplane.ToolsBin).
func ToolsBin() string { return controlplane.ToolsBin() }

// Tool is the path of one pinned tool (controlplane.Tool).
func Tool(name string) (string, error) { return controlplane.Tool(name) }

// LookTools checks that the named tools are present and runnable (controlplane.LookTools).
func LookTools(names ...string) (map[string]string, error) { return controlplane.LookTools(names...) }
