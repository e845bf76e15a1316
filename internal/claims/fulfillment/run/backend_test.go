// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"context"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/test"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// The backend's secrets reach a run only through its environment (the Job executor keeps the
// request in a Secret); the backend configuration, which tofu writes to disk and which a Job
// spec could show, holds none.
func TestRunRequestBackend(t *testing.T) {
	conn := "postgres://fulfiller:" + url.PathEscape(test.Passphrase) + "@db:5432/states?sslmode=require"
	secrets := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "state-key"},
			Data: map[string][]byte{"passphrase": []byte(test.Passphrase)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "pg"},
			Data: map[string][]byte{"conn": []byte(conn)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "hcloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
			Data: map[string][]byte{"HCLOUD_TOKEN": []byte(test.Passphrase), "PG_CONN_STR": []byte("not this one")}},
	).Build()
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(Options{Kube: secrets, APIReader: secrets, Clock: clk, Unavailable: marked{},
		Namespace: "fulfiller", StateNamespace: "fulfiller", TofuPath: "/bin/tofu", RunEnv: map[string]string{"KUBE_CONFIG_PATH": "/k"}, ClusterName: "prod-eu"})
	encryption := &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "state-key", Key: "passphrase"}}
	wantEnc, err := statelock.EncryptionEnv(test.Passphrase, "aes_gcm")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name        string
		backend     v1alpha1.Backend
		credentials []v1alpha1.CredentialsSource
		wantType    string
		config      map[string]string
		workspace   string
		env         map[string]string
		reason      string // of the BackendError, when the request cannot be built
	}{
		{name: "kubernetes", backend: v1alpha1.Backend{}, wantType: "kubernetes",
			config: map[string]string{"secret_suffix": "claim-a", "namespace": "fulfiller"},
			env:    map[string]string{"KUBE_CONFIG_PATH": "/k"}},
		{name: "kubernetes encrypted", backend: v1alpha1.Backend{Encryption: encryption}, wantType: "kubernetes",
			config: map[string]string{"secret_suffix": "claim-a", "namespace": "fulfiller"},
			env:    map[string]string{"KUBE_CONFIG_PATH": "/k", "TF_ENCRYPTION": wantEnc["TF_ENCRYPTION"]}},
		{name: "pg encrypted", wantType: "pg", workspace: "claim-a",
			backend: v1alpha1.Backend{Type: v1alpha1.BackendPG, Encryption: encryption,
				PG: &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "pg", Key: "conn"}, SchemaName: "nodes"}},
			config: map[string]string{"schema_name": "nodes"},
			env:    map[string]string{"KUBE_CONFIG_PATH": "/k", "PG_CONN_STR": conn, "TF_ENCRYPTION": wantEnc["TF_ENCRYPTION"]}},
		{name: "pg default schema", wantType: "pg", workspace: "claim-a",
			backend: v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "pg", Key: "conn"}}},
			config:  map[string]string{"schema_name": "fulfiller"},
			env:     map[string]string{"KUBE_CONFIG_PATH": "/k", "PG_CONN_STR": conn}},
		// Credentials reach the run as environment; the backend's own settings win.
		{name: "pg with credentials", wantType: "pg", workspace: "claim-a", credentials: []v1alpha1.CredentialsSource{{SecretName: "hcloud"}},
			backend: v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "pg", Key: "conn"}}},
			config:  map[string]string{"schema_name": "fulfiller"},
			env:     map[string]string{"KUBE_CONFIG_PATH": "/k", "PG_CONN_STR": conn, "HCLOUD_TOKEN": test.Passphrase}},
		{name: "credentials missing", reason: v1alpha1.ReasonCredentialsMissing, credentials: []v1alpha1.CredentialsSource{{SecretName: "gone"}}},
		{name: "encryption key missing", reason: v1alpha1.ReasonEncryptionKeyMissing,
			backend: v1alpha1.Backend{Encryption: &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "gone", Key: "passphrase"}}}},
		{name: "pg secret missing", reason: v1alpha1.ReasonBackendSecretMissing,
			backend: v1alpha1.Backend{Type: v1alpha1.BackendPG, PG: &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "pg", Key: "nope"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := test.TwoTypeClass()
			nc.Spec.Backend, nc.Spec.Credentials = tc.backend, tc.credentials
			f := &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "claim-a"}}
			f.Spec.StateKey, f.Spec.Module, f.Spec.NodeName, f.Spec.NodeClaimUID = "claim-a", "/m", "claim-a", "uid-a"
			f.Spec.NodeClass, f.Spec.NodePool = "c", "default"
			c := &Claim{F: f, Class: nc, Conds: f.StatusConditions()}
			req, err := r.request(context.Background(), c, tfrunner.Apply, 1)
			if tc.reason != "" {
				ce, ok := classconfig.AsConfigError(err)
				if !ok || ce.Reason != tc.reason || strings.Contains(ce.Message, test.Passphrase) {
					t.Fatalf("error %v, want a BackendError %s", err, tc.reason)
				}
				// The apply stage shows the reason and starts nothing.
				if _, err := applyDriver(r).start(context.Background(), c, 1, true); err != nil {
					t.Fatal(err)
				}
				if cond := c.Conds.Get(v1alpha1.ConditionApplied); cond == nil || cond.Reason != tc.reason || len(f.Status.Runs) != 0 {
					t.Errorf("Applied = %+v, runs %v", cond, f.Status.Runs)
				}
				// So does the destroy.
				if _, err := destroyDriver(r).start(context.Background(), c, 1, true); err != nil {
					t.Fatal(err)
				}
				if cond := c.Conds.Get(v1alpha1.ConditionDestroyed); cond == nil || cond.Reason != tc.reason || len(f.Status.Runs) != 0 {
					t.Errorf("Destroyed = %+v, runs %v", cond, f.Status.Runs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.Backend.Type != tc.wantType || req.Workspace != tc.workspace || !maps.Equal(req.Backend.Config, tc.config) || !maps.Equal(req.Env, tc.env) {
				t.Errorf("request backend %+v workspace %q env keys %v", req.Backend, req.Workspace, slices.Sorted(maps.Keys(req.Env)))
			}
			// The kubernetes backend labels the claim's state Secret and lock Lease with its UID.
			if labels := req.Backend.Maps["labels"]; tc.wantType == "kubernetes" && (len(labels) != 1 || labels[keys.LabelNodeClaimUID] != "uid-a") {
				t.Errorf("state labels %v, want %s=uid-a", labels, keys.LabelNodeClaimUID)
			}
			// The module labels its machine as this cluster's, the claim's, the class's and the pool's.
			labels, _ := req.Variables[tfrunner.VarLabels].(map[string]string)
			for k, v := range map[string]string{keys.LabelCluster: "prod-eu", keys.LabelNodeClaim: "claim-a",
				keys.LabelNodeClass: "c", keys.LabelNodePool: "default"} {
				if labels[k] != v {
					t.Errorf("label %s = %q, want %q (labels %v)", k, labels[k], v, labels)
				}
			}
			for k, v := range req.Backend.Config {
				if strings.Contains(v, test.Passphrase) {
					t.Errorf("backend config %s holds a secret", k)
				}
			}
		})
	}
}
