// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package classconfig is what every room of internal/claims reads of a TofuNodeClass and of
// the claims made from it: the Secrets it names (credentials, backend, encryption key) and
// their ConfigErrors, its family and pool, the run settings a claim records, what a node type
// says about its machines, and the keys of the objects the claims' controllers make. It is
// the one shared room: it imports no controller, and every controller may import it.
package classconfig
