// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package robot is the Hetzner Robot node-type family: dedicated servers rented ahead of
// need, leased to one claim at a time from a finite pool (internal/statelock inventory),
// activated warm (the installed OS and kubelet wait; the join configuration arrives over
// SSH) or cold (rescue system, installimage with a cloud-init seed, reboot), and released by
// a reinstall that runs on the server after the runner has returned.
//
// It holds the Robot webservice client (Client: form-encoded requests with basic auth, the
// error envelope as typed errors, retries and back-off through go-retryablehttp, and the
// documented hourly request budget of every endpoint it calls), SSH with host-key pinning
// (Dial, HostKeyMismatchError), the activation and release procedures (Activator) and the
// `fulfiller robot` command that modules/hetzner-robot runs from its provisioners.
//
// Production code only: the Robot API stand-in and the simulated dedicated servers are in
// package standin, which the controller binary never links.
package robot
