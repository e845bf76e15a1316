// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package garbagecollection

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// fulfillmentReads counts the Fulfillments read through it (the uncached reader).
type fulfillmentReads struct {
	client.Reader
	mu    sync.Mutex
	names []string
}

func (r *fulfillmentReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1alpha1.Fulfillment); ok {
		r.mu.Lock()
		r.names = append(r.names, key.Name)
		r.mu.Unlock()
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestSecretCollectorReadsLiveClaimsFromCache (issue 25, defect 9): a pass reads the live
// claims' Fulfillments from the cache, not from the API server (at 1,000 nodes every 20 s
// that was 50 reads a second); only a claim the cache does not know is read uncached before
// its Secrets are deleted, so a Fulfillment the cache has not seen yet keeps them.
func TestSecretCollectorReadsLiveClaimsFromCache(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	clk := clocktesting.NewFakeClock(now)
	userData := func(claim string) *corev1.Secret {
		labels := maps.Clone(classconfig.UserDataLabels())
		labels[keys.LabelNodeClaim] = claim
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: claim + "-user-data", Labels: labels,
			CreationTimestamp: metav1.Time{Time: now.Add(-time.Hour)}}, Type: corev1.SecretTypeOpaque}
	}
	var live []client.Object
	objects := []client.Object{userData("gone"), userData("just-made")}
	for _, claim := range []string{"live-1", "live-2", "live-3"} {
		f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim}}
		live = append(live, f)
		objects = append(objects, f, userData(claim))
	}
	// The API server has everything, the Fulfillment of "just-made" too; the cache has not
	// seen that one yet.
	api := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects...).
		WithObjects(&v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "just-made"}}).Build()
	cache := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(live...).Build()
	reads := &fulfillmentReads{Reader: api}
	// Deletes go to the API server; the cached client's reads are the cache's.
	kube := cachedClient{Client: api, cache: cache}
	o := NewSecretCollector(SecretOptions{Kube: kube, APIReader: reads, Clock: clk, Namespace: "fulfiller", Interval: time.Minute})
	if err := o.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	for _, claim := range []string{"live-1", "live-2", "live-3", "just-made"} {
		if err := api.Get(ctx, client.ObjectKeyFromObject(userData(claim)), &corev1.Secret{}); err != nil {
			t.Errorf("user data of %s: %v", claim, err)
		}
	}
	if err := api.Get(ctx, client.ObjectKeyFromObject(userData("gone")), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("user data of the gone claim: %v, want deleted", err)
	}
	want := map[string]bool{"gone": true, "just-made": true}
	for _, name := range reads.names {
		if !want[name] {
			t.Errorf("read the Fulfillment of %s uncached (all uncached reads: %v): the cache knows it", name, reads.names)
		}
	}
	if len(reads.names) != len(want) {
		t.Errorf("uncached Fulfillment reads %v, want one each of the claims the cache does not know", reads.names)
	}
}

// cachedClient reads Fulfillments from cache and writes through Client.
type cachedClient struct {
	client.Client
	cache client.Reader
}

func (c cachedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1alpha1.Fulfillment); ok {
		return c.cache.Get(ctx, key, obj, opts...)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}
