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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// registrationWindow is Karpenter's fixed time from claim creation to a registered Node;
// no token needs to outlive it.
const registrationWindow = v1alpha1.RegistrationWindow

// tokenStage keeps an unjoined claim's bootstrap token alive: a token lives only its TTL, but
// while the claim is still waiting for its machine (a slow apply, a slow boot) the expiry is
// pushed out, never past Karpenter's registration window. Once the node registers, the join
// stage revokes it.
type tokenStage struct{ c *FulfillmentController }

func (t *tokenStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if s.f.Status.TokenID == "" || s.conds.IsTrue(v1alpha1.ConditionJoined) || failed(s) || s.nc == nil || s.f.Status.Stages.ClaimCreated == nil {
		return reconcile.Result{}, nil
	}
	ttl := s.nc.TokenTTL()
	limit := s.f.Status.Stages.ClaimCreated.Add(registrationWindow + time.Minute)
	expires := s.minted.tokenExpires // minted just now: nothing to read back, nothing to extend
	if expires.IsZero() {
		secret := &corev1.Secret{}
		err := t.c.apiReader.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: bootstrapapi.BootstrapTokenSecretPrefix + s.f.Status.TokenID}, secret)
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil // revoked, or already expired and cleaned up
		}
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("reading bootstrap token: %w", err)
		}
		if expires, err = t.extend(ctx, s, secret, ttl, limit); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !expires.Before(limit) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: max(expires.Add(-ttl/2).Sub(t.c.clock.Now()), time.Second)}, nil
}

// extend pushes the expiry of the claim's token Secret out when it is due
// (tokenExtension), and returns the expiry it has now.
func (t *tokenStage) extend(ctx context.Context, s *claimState, secret *corev1.Secret, ttl time.Duration, limit time.Time) (time.Time, error) {
	expires, err := time.Parse(time.RFC3339, string(secret.Data[bootstrapapi.BootstrapTokenExpirationKey]))
	if err != nil {
		return time.Time{}, fmt.Errorf("bootstrap token %s has an unreadable expiration: %w", s.f.Status.TokenID, err)
	}
	next, extend := tokenExtension(t.c.clock.Now(), expires, ttl, limit)
	if extend {
		patch := client.MergeFrom(secret.DeepCopy())
		secret.Data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(next.UTC().Format(time.RFC3339))
		if err := t.c.kube.Patch(ctx, secret, patch); err != nil {
			return time.Time{}, fmt.Errorf("extending bootstrap token: %w", err)
		}
		log.FromContext(ctx).Info("extended bootstrap token of unjoined claim", "tokenID", s.f.Status.TokenID, "expires", next.UTC())
		expires = next
	}
	return expires, nil
}

// tokenExtension decides whether a token expiring at expires is extended now: once less than
// half its TTL is left, by a TTL from now, but never past limit.
func tokenExtension(now, expires time.Time, ttl time.Duration, limit time.Time) (time.Time, bool) {
	if expires.Sub(now) >= ttl/2 || !expires.Before(limit) || !now.Before(expires) {
		return expires, false
	}
	next := now.Add(ttl)
	if next.After(limit) {
		next = limit
	}
	return next, next.After(expires)
}

// failed reports whether a stage condition of the claim is False (it is being replaced).
func failed(s *claimState) bool {
	for _, t := range []string{v1alpha1.ConditionApplied, v1alpha1.ConditionJoined} {
		if c := s.conds.Get(t); c != nil && c.IsFalse() {
			return true
		}
	}
	return false
}
