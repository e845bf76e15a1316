// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package garbagecollection deletes what outlived its claim: bootstrap tokens and user data
// Secrets whose Fulfillment is gone (SecretCollector), and machines, their Nodes and states
// that no claim owns any more (MachineCollector).
package garbagecollection

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// SecretGracePeriod protects objects a claim is creating right now (its Fulfillment may be
// written a moment after its token).
const SecretGracePeriod = time.Minute

// SecretCollector deletes the bootstrap tokens and user data of claims whose Fulfillment is
// gone: a token must never outlive the claim it was minted for.
type SecretCollector struct {
	kube      client.Client
	apiReader client.Reader
	clock     clock.Clock
	namespace string
	interval  time.Duration
}

// SecretOptions are what the SecretCollector is built from.
type SecretOptions struct {
	// Kube is the manager's cached client: live claims' Fulfillments are read from its cache.
	Kube client.Client
	// APIReader reads uncached: Secrets are not in the cache, and a Fulfillment the cache
	// does not know is confirmed gone through it.
	APIReader client.Reader
	Clock     clock.Clock
	// Namespace holds the claims' user data.
	Namespace string
	Interval  time.Duration
}

// NewSecretCollector returns a collector that runs every interval.
func NewSecretCollector(o SecretOptions) *SecretCollector {
	return &SecretCollector{kube: o.Kube, apiReader: o.APIReader, clock: o.Clock, namespace: o.Namespace, interval: o.Interval}
}

// Register runs the collector on the leader, every interval.
func (o *SecretCollector) Register(_ context.Context, m manager.Manager) error {
	return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for {
			if err := o.Collect(ctx); err != nil {
				log.FromContext(ctx).Error(err, "collecting orphaned bootstrap tokens")
			}
			select {
			case <-ctx.Done():
				return nil
			case <-o.clock.After(o.interval):
			}
		}
	}))
}

// Collect deletes every token and user data Secret whose claim has no Fulfillment. It looks
// only at Secrets the fulfiller made (keys.LabelManagedBy): bootstrap tokens in
// kube-system, user data in the fulfiller's namespace; a Secret someone else labelled with a
// claim's name is never touched.
func (o *SecretCollector) Collect(ctx context.Context) error {
	for _, kind := range []struct {
		namespace string
		labels    client.MatchingLabels
		typ       corev1.SecretType
	}{
		{"kube-system", client.MatchingLabels{keys.LabelManagedBy: keys.ManagedBy}, bootstrapapi.SecretTypeBootstrapToken},
		{o.namespace, classconfig.UserDataLabels(), corev1.SecretTypeOpaque},
	} {
		list := &corev1.SecretList{}
		if err := o.apiReader.List(ctx, list, client.InNamespace(kind.namespace), kind.labels, client.HasLabels{keys.LabelNodeClaim}); err != nil {
			return fmt.Errorf("listing claim secrets in %s: %w", kind.namespace, err)
		}
		for i := range list.Items {
			secret := &list.Items[i]
			if secret.Type != kind.typ || o.clock.Since(secret.CreationTimestamp.Time) < SecretGracePeriod {
				continue
			}
			if gone, err := fulfillmentGone(ctx, o.kube, o.apiReader, secret.Labels[keys.LabelNodeClaim]); err != nil || !gone {
				if err != nil {
					return err
				}
				continue
			}
			if err := o.kube.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting orphaned secret %s/%s: %w", secret.Namespace, secret.Name, err)
			}
			log.FromContext(ctx).Info("deleted secret of a claim that no longer exists", "secret", client.ObjectKeyFromObject(secret), "nodeclaim", secret.Labels[keys.LabelNodeClaim])
		}
	}
	return nil
}

// fulfillmentGone reports whether a claim has no Fulfillment. A live claim is found in the
// cache (each pass costs the API server nothing for it); only a claim the cache does not know
// is read uncached, so that one whose Fulfillment the cache has not seen yet is not taken
// for gone.
func fulfillmentGone(ctx context.Context, cached, uncached client.Reader, claim string) (bool, error) {
	key := client.ObjectKey{Name: claim}
	err := cached.Get(ctx, key, &v1alpha1.Fulfillment{})
	if err == nil {
		return false, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading fulfillment %s from the cache: %w", claim, err)
	}
	err = uncached.Get(ctx, key, &v1alpha1.Fulfillment{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading fulfillment %s: %w", claim, err)
	}
	return false, nil
}
