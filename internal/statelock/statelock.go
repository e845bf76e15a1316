// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package statelock owns where each claim's OpenTofu state lives and who holds its lock: the
// per-claim state key, the backend configuration handed to the runner, reading the lock
// holder, and removing a state once its machine is destroyed.
package statelock

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Workspace is the OpenTofu workspace every claim's state uses; each claim has its own
// secret_suffix instead.
const Workspace = "default"

// lockInfoAnnotation is where the kubernetes backend records the holder's LockInfo.
const lockInfoAnnotation = "app.terraform.io/lock-info"

// Key is a claim's state key: the kubernetes backend's secret_suffix.
type Key string

// KeyFor derives the state key of a NodeClaim. It is the claim's name, which is unique and
// DNS-1123 already; the backend prefixes it with "tfstate-default-".
func KeyFor(claimName string) (Key, error) {
	key := strings.ToLower(claimName)
	if errs := validation.IsDNS1123Subdomain("tfstate-" + Workspace + "-" + key); len(errs) > 0 {
		return "", fmt.Errorf("claim name %q cannot name a state: %s", claimName, strings.Join(errs, "; "))
	}
	return Key(key), nil
}

// SecretName is the state Secret of the kubernetes backend.
func (k Key) SecretName() string { return "tfstate-" + Workspace + "-" + string(k) }

// LeaseName is the lock Lease of the kubernetes backend.
func (k Key) LeaseName() string { return "lock-tfstate-" + Workspace + "-" + string(k) }

// KubernetesBackend is the `-backend-config` of the kubernetes backend for one claim. The
// runner's credentials come from its environment (its pod's service account, or
// KUBE_CONFIG_PATH for the local executor), never from these values, which tofu writes to
// disk.
func KubernetesBackend(key Key, namespace string) map[string]string {
	return map[string]string{
		"secret_suffix": string(key),
		"namespace":     namespace,
	}
}

// Holder is who holds a state lock, from the backend's LockInfo.
type Holder struct {
	ID        string    `json:"ID"`
	Operation string    `json:"Operation"`
	Who       string    `json:"Who"`
	Info      string    `json:"Info"`
	Created   time.Time `json:"Created"`
}

// LockHolder returns the holder of a claim's lock, or nil when it is free.
func LockHolder(ctx context.Context, c client.Reader, namespace string, key Key) (*Holder, error) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: key.LeaseName()}, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading lock lease: %w", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return nil, nil
	}
	h := &Holder{ID: *lease.Spec.HolderIdentity}
	if raw := lease.Annotations[lockInfoAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), h); err != nil {
			return nil, fmt.Errorf("parsing lock info of %s: %w", key.LeaseName(), err)
		}
	}
	return h, nil
}

// Remove deletes a claim's state Secret and lock Lease. Call it only after a successful
// destroy: the kubernetes backend leaves both behind.
func Remove(ctx context.Context, c client.Client, namespace string, key Key) error {
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: key.SecretName()}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: key.LeaseName()}},
	} {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing state object %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// Exists reports whether a claim's state Secret exists.
func Exists(ctx context.Context, c client.Reader, namespace string, key Key) (bool, error) {
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: key.SecretName()}, &corev1.Secret{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading state secret: %w", err)
	}
	return true, nil
}
