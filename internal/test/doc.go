// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package test holds what tests of the controllers share, in the manner of Karpenter's
// pkg/test: a fake API client that behaves as the controllers need (the status subresource,
// the field indexes they list by, injected errors), object builders with overrides, an event
// recorder, and Expect* helpers. It keeps no global state: each test builds its own. Only
// tests import it; the controller binary must not link it.
package test
