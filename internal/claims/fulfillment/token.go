// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

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
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// tokenStage keeps an unjoined claim's bootstrap token alive: a token lives only its TTL, but
// while the claim is still waiting for its machine (a slow apply, a slow boot) the expiry is
// pushed out, never past Karpenter's registration window (no token needs to outlive it). Once the node registers, the join
// stage revokes it.
type tokenStage struct {
	kube      client.Client
	apiReader client.Reader
	clock     clock.Clock
}

func (t *tokenStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if s.F.Status.TokenID == "" || s.Conds.IsTrue(v1alpha1.ConditionJoined) || failed(s) || s.Class == nil || s.F.Status.Stages.ClaimCreated == nil {
		return reconcile.Result{}, nil
	}
	ttl := s.Class.TokenTTL()
	limit := s.F.Status.Stages.ClaimCreated.Add(classconfig.RegistrationWindow + time.Minute)
	expires := s.tokenExpires // minted just now: nothing to read back, nothing to extend
	if expires.IsZero() {
		secret := &corev1.Secret{}
		err := t.apiReader.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: bootstrapapi.BootstrapTokenSecretPrefix + s.F.Status.TokenID}, secret)
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
	return reconcile.Result{RequeueAfter: max(expires.Add(-ttl/2).Sub(t.clock.Now()), time.Second)}, nil
}

// extend pushes the expiry of the claim's token Secret out when it is due
// (tokenExtension), and returns the expiry it has now.
func (t *tokenStage) extend(ctx context.Context, s *claimState, secret *corev1.Secret, ttl time.Duration, limit time.Time) (time.Time, error) {
	expires, err := time.Parse(time.RFC3339, string(secret.Data[bootstrapapi.BootstrapTokenExpirationKey]))
	if err != nil {
		return time.Time{}, fmt.Errorf("bootstrap token %s has an unreadable expiration: %w", s.F.Status.TokenID, err)
	}
	next, extend := tokenExtension(t.clock.Now(), expires, ttl, limit)
	if extend {
		patch := client.MergeFrom(secret.DeepCopy())
		secret.Data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(next.UTC().Format(time.RFC3339))
		if err := t.kube.Patch(ctx, secret, patch); err != nil {
			return time.Time{}, fmt.Errorf("extending bootstrap token: %w", err)
		}
		log.FromContext(ctx).Info("extended bootstrap token of unjoined claim", "tokenID", s.F.Status.TokenID, "expires", next.UTC())
		labels := with(claimLabels(s.F, classFamily(s)), "event", tokenExtended)
		s.afterWrite = append(s.afterWrite, func() { bootstrapTokens.With(labels).Inc() })
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

// revokeTokens deletes the claim's bootstrap token Secrets: once the node registered, or its
// machine is destroyed, nobody may join with them again.
func revokeTokens(ctx context.Context, kube client.Client, claim string) error {
	err := kube.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace("kube-system"),
		client.MatchingLabels{keys.LabelNodeClaim: claim, keys.LabelManagedBy: keys.ManagedBy}, client.MatchingFields{"type": "bootstrap.kubernetes.io/token"})
	if err != nil {
		return fmt.Errorf("revoking bootstrap tokens: %w", err)
	}
	return nil
}
