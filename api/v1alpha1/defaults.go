// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of the API live here once, as methods that read a field and fall back to its
// default. Code reads the methods, never a field that has a default. Most fields carry no
// +kubebuilder:default marker, so these methods are their only default. The fields whose
// value decides where existing claims' states are (backend.type, backend.pg.schemaName,
// backend.encryption.method) keep the marker as well, so that the API server stores the value
// and their immutability rules hold from the start; defaults_test.go checks that the CRD's
// default and the method agree.

// Default values.
const (
	DefaultApplyDeadline  = 4 * time.Minute
	DefaultJoinTimeout    = 10 * time.Minute
	DefaultCNIDeadline    = 5 * time.Minute
	DefaultGPUDeadline    = 10 * time.Minute
	DefaultCustomDeadline = 10 * time.Minute
	DefaultTokenTTL       = 30 * time.Minute
	DefaultArchitecture   = "amd64"
	DefaultCapacityType   = "on-demand"
	// DefaultPGSchema is the pg backend's schema when the class names none.
	DefaultPGSchema = "fulfiller"
	// DefaultMetadataURL and DefaultProviderIDPrefix are Hetzner Cloud's (docs.hetzner.cloud
	// "Server Metadata"): where a machine of a type without a provider ID template reads its
	// instance ID, and what goes before it.
	DefaultMetadataURL      = "http://169.254.169.254/hetzner/v1/metadata/instance-id"
	DefaultProviderIDPrefix = "hcloud://"
)

// ApplyDeadline is how long an apply of the type may take (deadlines.apply).
func (in *NodeType) ApplyDeadline() time.Duration {
	return durationOr(in.Deadlines.Apply, DefaultApplyDeadline)
}

// JoinTimeoutOrDefault is how long a machine of the type may take to register (joinTimeout).
func (in *NodeType) JoinTimeoutOrDefault() time.Duration {
	return durationOr(in.JoinTimeout, DefaultJoinTimeout)
}

// CNIDeadline is the CNI gate's deadline from registration (deadlines.cni).
func (in *NodeType) CNIDeadline() time.Duration {
	return durationOr(in.Deadlines.CNI, DefaultCNIDeadline)
}

// GPUDeadline is the GPU gate's deadline from registration (deadlines.gpu).
func (in *NodeType) GPUDeadline() time.Duration {
	return durationOr(in.Deadlines.GPU, DefaultGPUDeadline)
}

// CustomDeadline is the custom gates' deadline from registration (deadlines.custom).
func (in *NodeType) CustomDeadline() time.Duration {
	return durationOr(in.Deadlines.Custom, DefaultCustomDeadline)
}

// ProviderIDFromOrDefault is where a machine of the type reads its instance ID and the prefix
// of its provider ID (providerIDFrom), used when no template makes the provider ID known.
func (in *NodeType) ProviderIDFromOrDefault() ProviderIDFrom {
	out := ProviderIDFrom{MetadataURL: DefaultMetadataURL, Prefix: DefaultProviderIDPrefix}
	if from := in.ProviderIDFrom; from != nil {
		if from.MetadataURL != "" {
			out.MetadataURL = from.MetadataURL
		}
		if from.Prefix != "" {
			out.Prefix = from.Prefix
		}
	}
	return out
}

// ApplyDeadlineOrDefault bounds each apply run of the claim (its node type's deadlines.apply
// as recorded).
func (in *RunSettings) ApplyDeadlineOrDefault() time.Duration {
	return durationOr(in.ApplyDeadline, DefaultApplyDeadline)
}

// ArchitectureOrDefault is the type's kubernetes.io/arch.
func (in *NodeType) ArchitectureOrDefault() string {
	if in.Architecture == "" {
		return DefaultArchitecture
	}
	return in.Architecture
}

// CapacityTypeOrDefault is the offering's karpenter.sh/capacity-type.
func (in Offering) CapacityTypeOrDefault() string {
	if in.CapacityType == "" {
		return DefaultCapacityType
	}
	return in.CapacityType
}

// TokenTTL is how long a claim's bootstrap token is valid (bootstrap.tokenTTL).
func (in *TofuNodeClass) TokenTTL() time.Duration {
	if d := in.Spec.Bootstrap.TokenTTL.Duration; d > 0 {
		return d
	}
	return DefaultTokenTTL
}

// PolicyOrDefault is what happens to a node whose readiness gate missed its deadline.
func (in ReadinessSpec) PolicyOrDefault() GatePolicy {
	if in.Policy == "" {
		return GatePolicyReportOnly
	}
	return in.Policy
}

// StatusOrDefault is the status the custom gate's node condition must have.
func (in NodeConditionMatch) StatusOrDefault() string {
	if in.Status == "" {
		return "True"
	}
	return in.Status
}

// TypeOrDefault is the backend's type.
func (in Backend) TypeOrDefault() BackendType {
	if in.Type == "" {
		return BackendKubernetes
	}
	return in.Type
}

// PGSchema is the pg backend's schema.
func (in Backend) PGSchema() string {
	if in.PG != nil && in.PG.SchemaName != "" {
		return in.PG.SchemaName
	}
	return DefaultPGSchema
}

// MethodOrDefault is the state encryption's method.
func (in BackendEncryption) MethodOrDefault() EncryptionMethod {
	if in.Method == "" {
		return EncryptionAESGCM
	}
	return in.Method
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d != nil && d.Duration > 0 {
		return d.Duration
	}
	return def
}

// Catalogue refresh intervals (spec.catalog.refreshInterval).
const (
	DefaultCatalogRefresh = 10 * time.Minute
	MinCatalogRefresh     = time.Minute
)

// RefreshIntervalOrDefault is how often the class's catalogue is read: default 10m, at least 1m.
func (in *Catalog) RefreshIntervalOrDefault() time.Duration {
	if in == nil || in.RefreshInterval == nil || in.RefreshInterval.Duration <= 0 {
		return DefaultCatalogRefresh
	}
	return max(in.RefreshInterval.Duration, MinCatalogRefresh)
}

// GrossPrices reports whether the class wants prices with VAT.
func (in *Catalog) GrossPrices() bool { return in != nil && in.Prices == "gross" }

// DefaultScaleDownMargin is how long before its paid period ends a node kept by the
// AtPaidPeriodEnd policy is let go when the class sets no margin.
const DefaultScaleDownMargin = 5 * time.Minute

// MarginOrDefault is the scale-down margin, DefaultScaleDownMargin when unset.
func (in *ScaleDown) MarginOrDefault() time.Duration {
	if in.Margin != nil && in.Margin.Duration >= 0 {
		return in.Margin.Duration
	}
	return DefaultScaleDownMargin
}
