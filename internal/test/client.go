// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package test

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// Field indexes the controllers list by, as the operator registers them.
const (
	// NodeProviderIDField indexes Nodes by spec.providerID (the join stage finds a claim's
	// Node by it; Karpenter's operator registers it).
	NodeProviderIDField = "spec.providerID"
	// NodeClaimProviderIDField indexes NodeClaims by status.providerID (a pool offers no
	// machine a claim still carries; Karpenter's operator registers it).
	NodeClaimProviderIDField = "status.providerID"
	// SecretTypeField indexes Secrets by type (token revocation deletes bootstrap tokens by
	// it; the API server supports the field selector).
	SecretTypeField = "type"
)

// NewClient is a fake API client holding objs, with the status subresource of the
// fulfiller's and Karpenter's types and of Nodes, and the field indexes the controllers use.
// Like the API server, it moves a Secret's stringData into its data on create and update.
// funcs intercept other calls (e.g. a status write that conflicts); nil for none.
func NewClient(funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	var f interceptor.Funcs
	if funcs != nil {
		f = *funcs
	}
	create, update := f.Create, f.Update
	f.Create = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		mergeStringData(obj)
		if create != nil {
			return create(ctx, c, obj, opts...)
		}
		return c.Create(ctx, obj, opts...)
	}
	f.Update = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		mergeStringData(obj)
		if update != nil {
			return update(ctx, c, obj, opts...)
		}
		return c.Update(ctx, obj, opts...)
	}
	b := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&v1alpha1.Fulfillment{}, &v1alpha1.TofuNodeClass{}, &v1alpha1.BootReport{}, &karpv1.NodeClaim{}, &corev1.Node{}).
		WithIndex(&corev1.Node{}, NodeProviderIDField, func(o client.Object) []string {
			return []string{o.(*corev1.Node).Spec.ProviderID}
		}).
		WithIndex(&karpv1.NodeClaim{}, NodeClaimProviderIDField, func(o client.Object) []string {
			return []string{o.(*karpv1.NodeClaim).Status.ProviderID}
		}).
		WithIndex(&corev1.Secret{}, SecretTypeField, func(o client.Object) []string {
			return []string{string(o.(*corev1.Secret).Type)}
		}).
		WithObjects(objs...).
		WithInterceptorFuncs(f)
	return b.Build()
}

// mergeStringData moves a Secret's stringData into its data, as the API server does.
func mergeStringData(obj client.Object) {
	s, ok := obj.(*corev1.Secret)
	if !ok || len(s.StringData) == 0 {
		return
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}
