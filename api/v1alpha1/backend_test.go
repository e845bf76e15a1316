// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// TestBackendValidation: the API server itself refuses backends that cannot work and changes
// that would lose the states of existing claims (a claim's state is found by the class's
// current backend settings).
func TestBackendValidation(t *testing.T) {
	ctx := context.Background()
	kube := apiServer(t)
	class := func(name string, backend v1alpha1.Backend) *v1alpha1.TofuNodeClass {
		return &v1alpha1.TofuNodeClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.TofuNodeClassSpec{
				Module:    v1alpha1.ModuleSource{Source: "/m"},
				Backend:   backend,
				Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: "127.0.0.1:6443"},
				NodeTypes: []v1alpha1.NodeType{{Name: "small",
					Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
					Offerings: []v1alpha1.Offering{{Zone: "a", Price: "0.01"}}}},
			},
		}
	}
	pg := &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "db", Key: "url"}}
	key := v1alpha1.SecretKeyRef{Name: "state-key", Key: "passphrase"}

	for _, tc := range []struct {
		name    string
		backend v1alpha1.Backend
		want    string // in the refusal; empty: accepted
	}{
		{name: "pg-without-settings", backend: v1alpha1.Backend{Type: v1alpha1.BackendPG}, want: "backend type pg needs spec.backend.pg"},
		{name: "unknown-type", backend: v1alpha1.Backend{Type: "s4"}, want: "Unsupported value"},
		{name: "bad-schema", backend: v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: &v1alpha1.PGBackendSpec{ConnSecretRef: pg.ConnSecretRef, SchemaName: "Bad-Schema"}}, want: "schemaName"},
		{name: "encryption-without-key", backend: v1alpha1.Backend{Encryption: &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "k"}}}, want: "keySecretRef.key"},
		{name: "unknown-method", backend: v1alpha1.Backend{Encryption: &v1alpha1.BackendEncryption{KeySecretRef: key, Method: "rot13"}}, want: "Unsupported value"},
		{name: "pg-encrypted", backend: v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: pg, Encryption: &v1alpha1.BackendEncryption{KeySecretRef: key}}},
	} {
		err := kube.Create(ctx, class(tc.name, tc.backend))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: create = %v, want %q", tc.name, err, tc.want)
		}
	}

	got := &v1alpha1.TofuNodeClass{}
	if err := kube.Get(ctx, client.ObjectKey{Name: "pg-encrypted"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Backend.PG.SchemaName != v1alpha1.DefaultPGSchema || got.Spec.Backend.Encryption.Method != v1alpha1.EncryptionAESGCM {
		t.Errorf("defaults not applied: %+v %+v", got.Spec.Backend.PG, got.Spec.Backend.Encryption)
	}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.Backend)
		want   string
	}{
		{name: "type", change: func(b *v1alpha1.Backend) { b.Type = v1alpha1.BackendKubernetes; b.PG = nil }, want: "spec.backend.type is immutable"},
		{name: "schema", change: func(b *v1alpha1.Backend) { b.PG.SchemaName = "other" }, want: "spec.backend.pg.schemaName is immutable"},
	} {
		changed := got.DeepCopy()
		tc.change(&changed.Spec.Backend)
		if err := kube.Update(ctx, changed); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("changing the %s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Other settings may change (the connection string's Secret, e.g. after a rotation).
	changed := got.DeepCopy()
	changed.Spec.Backend.PG.ConnSecretRef.Name = "db-rotated"
	if err := kube.Update(ctx, changed); err != nil {
		t.Errorf("changing the connection secret: %v", err)
	}

	// A class created without spec.backend (the API server stores none, so no default either):
	// the backend cannot be added afterwards, as if it had always been there.
	bare := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "TofuNodeClass",
		"metadata": map[string]any{"name": "bare"},
		"spec": map[string]any{
			"module":    map[string]any{"source": "/m"},
			"bootstrap": map[string]any{"apiServerEndpoint": "127.0.0.1:6443"},
			"nodeTypes": []any{map[string]any{"name": "small", "capacity": map[string]any{"cpu": "2", "memory": "4Gi"},
				"offerings": []any{map[string]any{"zone": "a", "price": "0.01"}}}},
		},
	}}
	if err := kube.Create(ctx, bare); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		backend v1alpha1.Backend
		want    string // empty: accepted
	}{
		{name: "type pg", backend: v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: pg}, want: "spec.backend.type is immutable"},
		{name: "a namespace", backend: v1alpha1.Backend{Namespace: "elsewhere"}, want: "spec.backend.namespace is immutable"},
		{name: "the default type", backend: v1alpha1.Backend{Type: v1alpha1.BackendKubernetes}},
	} {
		got := &v1alpha1.TofuNodeClass{}
		if err := kube.Get(ctx, client.ObjectKey{Name: "bare"}, got); err != nil {
			t.Fatal(err)
		}
		if tc.want != "" && got.Spec.Backend.Type != "" {
			t.Fatalf("the class without a backend has one: %+v", got.Spec.Backend)
		}
		got.Spec.Backend = tc.backend
		err := kube.Update(ctx, got)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("adding %s to a class created without a backend: %v, want %q", tc.name, err, tc.want)
		}
	}

	// A provider ID template that does not name the node gives every claim the same ID.
	for _, tc := range []struct{ template, want string }{
		{"kubevirt://vm", "providerIDTemplate must contain {name}"},
		{"kubevirt://{name}", ""},
	} {
		nc := class("template-"+strings.Trim(strings.ReplaceAll(tc.template, "/", ""), "{}:"), v1alpha1.Backend{})
		nc.Name = strings.NewReplacer("{", "", "}", "", ":", "").Replace(nc.Name)
		nc.Spec.NodeTypes[0].ProviderIDTemplate = tc.template
		err := kube.Create(ctx, nc)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("template %q: create = %v, want %q", tc.template, err, tc.want)
		}
	}
}
