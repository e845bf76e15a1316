// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock

import (
	"context"
	"errors"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestKeyNames(t *testing.T) {
	key, err := KeyFor("sim-abc12")
	if err != nil {
		t.Fatal(err)
	}
	// The names OpenTofu's kubernetes backend uses for secret_suffix "sim-abc12".
	if key.SecretName() != "tfstate-default-sim-abc12" || key.LeaseName() != "lock-tfstate-default-sim-abc12" {
		t.Errorf("names %s, %s", key.SecretName(), key.LeaseName())
	}
	if _, err := KeyFor("Bad_Name"); err == nil {
		t.Error("a claim name that cannot name a Secret was accepted")
	}
	if _, err := KeyFor(strings.Repeat("a", 250)); err == nil {
		t.Error("a state name over 253 characters was accepted")
	}
	cfg := KubernetesBackend(key, "fulfiller")
	if cfg["secret_suffix"] != "sim-abc12" || cfg["namespace"] != "fulfiller" || len(cfg) != 2 {
		t.Errorf("backend config %v: want only secret_suffix and namespace (credentials come from the environment)", cfg)
	}
}

func TestLockHolderAndRemove(t *testing.T) {
	ctx := context.Background()
	key := Key("sim-abc12")
	holder := "0b1e5a6c-1111-2222-3333-444455556666"
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: key.LeaseName(), Annotations: map[string]string{
			lockInfoAnnotation: `{"ID":"` + holder + `","Operation":"OperationTypeApply","Who":"runner@sim-abc12-apply-1","Created":"2026-11-30T12:00:00Z"}`,
		}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: key.SecretName()}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(lease, secret).Build()
	h, err := LockHolder(ctx, c, "fulfiller", key)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil || h.ID != holder || h.Who != "runner@sim-abc12-apply-1" || h.Operation != "OperationTypeApply" || h.Created.IsZero() {
		t.Fatalf("holder = %+v", h)
	}
	if exists, err := Exists(ctx, c, "fulfiller", key); err != nil || !exists {
		t.Fatalf("Exists = %v, %v", exists, err)
	}
	if err := Remove(ctx, c, "fulfiller", key); err != nil {
		t.Fatal(err)
	}
	if err := Remove(ctx, c, "fulfiller", key); err != nil {
		t.Errorf("a second Remove failed: %v", err)
	}
	if h, err := LockHolder(ctx, c, "fulfiller", key); err != nil || h != nil {
		t.Errorf("after Remove: holder %+v, err %v", h, err)
	}
	if exists, _ := Exists(ctx, c, "fulfiller", key); exists {
		t.Error("state still exists after Remove")
	}
}

func TestReleaseStale(t *testing.T) {
	ctx := context.Background()
	key := Key("sim-xyz34")
	id := "0b1e5a6c-1111-2222-3333-444455556666"
	lease := func(holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: key.LeaseName(), Annotations: map[string]string{
				lockInfoAnnotation: `{"ID":"` + holder + `","Who":"root@sim-xyz34-apply-1-abcde"}`,
			}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(lease(id)).Build()
	if err := ReleaseStale(ctx, c, c, "fulfiller", key, &Holder{ID: "another-lock"}); !errors.Is(err, ErrLockChanged) {
		t.Fatalf("releasing a lock held by someone else: %v, want ErrLockChanged", err)
	}
	if h, _ := LockHolder(ctx, c, "fulfiller", key); h == nil || h.ID != id {
		t.Fatalf("the lock of another holder was touched: %+v", h)
	}
	if err := ReleaseStale(ctx, c, c, "fulfiller", key, &Holder{ID: id}); err != nil {
		t.Fatal(err)
	}
	if h, err := LockHolder(ctx, c, "fulfiller", key); err != nil || h != nil {
		t.Fatalf("after release: holder %+v, err %v", h, err)
	}
	if err := ReleaseStale(ctx, c, c, "fulfiller", key, &Holder{ID: id}); !errors.Is(err, ErrLockChanged) {
		t.Errorf("releasing a free lock: %v, want ErrLockChanged", err)
	}
}

// TestValidatePGConnString: connection strings lib/pq reads as meant pass; one whose password
// would cut the URL short or make it no URL fails with the character to encode, and the error
// never shows the password.
func TestValidatePGConnString(t *testing.T) {
	const pw = "s3cretPassw0rd"
	for _, tc := range []struct {
		conn string
		want string // in the error; "" when valid
	}{
		{"postgres://fulfiller:" + pw + "@db:5432/states?sslmode=require", ""},
		{"postgresql://fulfiller:" + pw + "%23%40@db/states", ""},
		{"postgres://fulfiller:" + pw + "@with-at@db/states", ""}, // lib/pq reads up to the last '@'
		{"postgres:///states?host=/var/run/postgresql", ""},
		{"host=db user=fulfiller password=" + pw + " dbname=states", ""},
		{"postgres://fulfiller:" + pw + "#x@db/states", "percent-encode it as %23"},
		{"postgres://fulfiller:" + pw + "/x@db/states", "percent-encode it as %2F"},
		{"postgres://fulfiller:" + pw + "?x@db/states", "percent-encode it as %3F"},
		{"postgres://fulfiller:" + pw + "\"x@db/states", "must be percent-encoded"},
		{"postgres://fulfiller:" + pw + " x@db/states", "must be percent-encoded"},
		{"postgres://fulfiller:" + pw + "%zz@db/states", "%25"},
		{"mysql://fulfiller:" + pw + "@db/states", "scheme must be postgres"},
		{"host=db password='" + pw, "neither a postgres:// URL nor key=value"},
	} {
		err := ValidatePGConnString(tc.conn)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.conn, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConnString)):
			t.Errorf("%q: %v, want an error saying %q", tc.conn, err, tc.want)
		case err != nil && strings.Contains(err.Error(), pw[:6]):
			t.Errorf("%q: the error shows the password: %v", tc.conn, err)
		}
	}
}
