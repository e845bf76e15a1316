// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package hcloud is the Hetzner Cloud node-type family: modules/hetzner-cloud run by the real
// OpenTofu provider (hetznercloud/hcloud) against the Hetzner Cloud API. Its stand-in for the
// API, for tests and the local environment, is the standin package. The family gives the
// seam (internal/family) its credentials check (its error rules are hcloudrules, which the
// runner reads through internal/providers/rules); its tests prove the
// module with the real provider against the stand-in, machines that join included.
package hcloud
