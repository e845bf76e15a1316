// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package fulfillment is the Fulfillment controller: it turns a claim's record into a machine
// that joined and is ready, and back into nothing. A reconcile gathers what the claim needs
// (controller.go), runs its stages in order, one file each (token.go, apply.go, machine.go,
// bootstrap.go, join.go, gates.go, initialization.go, and finalize.go for the destroy), and
// writes the status once with optimistic locking; events and metrics follow that write. The
// gates' decisions are pure (fulfillment/gates); the runs are driven by fulfillment/run.
package fulfillment
