// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

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
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// orphanGracePeriod protects objects a claim is creating right now (its Fulfillment may be
// written a moment after its token).
const orphanGracePeriod = time.Minute

// OrphanCollector deletes the bootstrap tokens and user data of claims whose Fulfillment is
// gone: a token must never outlive the claim it was minted for.
type OrphanCollector struct {
	kube      client.Client
	apiReader client.Reader
	clock     clock.Clock
	namespace string
	interval  time.Duration
}

func NewOrphanCollector(kube client.Client, apiReader client.Reader, clk clock.Clock, namespace string, interval time.Duration) *OrphanCollector {
	return &OrphanCollector{kube: kube, apiReader: apiReader, clock: clk, namespace: namespace, interval: interval}
}

// Register runs the collector on the leader, every interval.
func (o *OrphanCollector) Register(_ context.Context, m manager.Manager) error {
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
// only at Secrets the fulfiller made (bootstrap.LabelManagedBy): bootstrap tokens in
// kube-system, user data in the fulfiller's namespace; a Secret someone else labelled with a
// claim's name is never touched.
func (o *OrphanCollector) Collect(ctx context.Context) error {
	for _, kind := range []struct {
		namespace string
		labels    client.MatchingLabels
		typ       corev1.SecretType
	}{
		{"kube-system", client.MatchingLabels{bootstrap.LabelManagedBy: bootstrap.ManagedBy}, bootstrapapi.SecretTypeBootstrapToken},
		{o.namespace, userDataLabels(), corev1.SecretTypeOpaque},
	} {
		list := &corev1.SecretList{}
		if err := o.apiReader.List(ctx, list, client.InNamespace(kind.namespace), kind.labels, client.HasLabels{LabelNodeClaim}); err != nil {
			return fmt.Errorf("listing claim secrets in %s: %w", kind.namespace, err)
		}
		for i := range list.Items {
			secret := &list.Items[i]
			if secret.Type != kind.typ || o.clock.Since(secret.CreationTimestamp.Time) < orphanGracePeriod {
				continue
			}
			err := o.apiReader.Get(ctx, client.ObjectKey{Name: secret.Labels[LabelNodeClaim]}, &v1alpha1.Fulfillment{})
			if !apierrors.IsNotFound(err) {
				if err != nil {
					return fmt.Errorf("reading fulfillment: %w", err)
				}
				continue
			}
			if err := o.kube.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting orphaned secret %s/%s: %w", secret.Namespace, secret.Name, err)
			}
			log.FromContext(ctx).Info("deleted secret of a claim that no longer exists", "secret", client.ObjectKeyFromObject(secret), "nodeclaim", secret.Labels[LabelNodeClaim])
		}
	}
	return nil
}
