// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Store is what the controller asks of the place a backend keeps claims' states, besides
// running tofu: who holds a claim's lock, whether its state exists, and removing it after a
// successful destroy.
type Store interface {
	// LockHolder returns the holder of a claim's lock, or nil when it is free.
	LockHolder(ctx context.Context, key Key) (*Holder, error)
	// Exists reports whether a claim's state exists.
	Exists(ctx context.Context, key Key) (bool, error)
	// Remove deletes a claim's state (and lock objects). Call it only after a successful
	// destroy, or when no apply ever wrote one.
	Remove(ctx context.Context, key Key) error
}

// KubernetesStore is the kubernetes backend's Store: a Secret and a Lease per claim in
// Namespace. Reader reads (uncached), Writer deletes.
type KubernetesStore struct {
	Reader    client.Reader
	Writer    client.Client
	Namespace string
}

var _ Store = KubernetesStore{}

func (s KubernetesStore) LockHolder(ctx context.Context, key Key) (*Holder, error) {
	return LockHolder(ctx, s.Reader, s.Namespace, key)
}

func (s KubernetesStore) Exists(ctx context.Context, key Key) (bool, error) {
	return Exists(ctx, s.Reader, s.Namespace, key)
}

func (s KubernetesStore) Remove(ctx context.Context, key Key) error {
	return Remove(ctx, s.Writer, s.Namespace, key)
}
