// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// TestEncryptedStatesInPostgres: a class with the pg backend and state encryption whose key
// Secret is missing is not Ready and buys nothing; once the Secret exists, a pod gets a node
// whose state is an encrypted row in PostgreSQL (nothing in the cluster's state Secrets);
// scaled to zero, the machine is destroyed with the same key and the row removed.
func TestEncryptedStatesInPostgres(t *testing.T) {
	ctx := ctxFor(t, 8*time.Minute)
	conn := testenv.PostgresT(t, "states")
	const passphrase = "e2e state passphrase, long enough"
	create(t, ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: "e2e-state-db"},
		Data: map[string][]byte{"url": []byte(conn)}})
	t.Cleanup(func() {
		for _, name := range []string{"e2e-state-db", "e2e-state-key"} {
			_ = env.kube.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: name}})
		}
	})

	class := nodeClass("e2e-pg", nodeType("pg-small", "0.01", nil))
	class.Spec.Backend = v1alpha1.Backend{
		Type:       v1alpha1.BackendPG,
		PG:         &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "e2e-state-db", Key: "url"}},
		Encryption: &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "e2e-state-key", Key: "passphrase"}},
	}
	create(t, ctx, class, nodePool("e2e-pg", "e2e-pg"))
	var ready *status.Condition
	eventually(t, ctx, time.Minute, "the nodeclass to report the missing key", func(ctx context.Context) (bool, error) {
		nc := &v1alpha1.TofuNodeClass{}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: "e2e-pg"}, nc); err != nil {
			return false, err
		}
		ready = nc.StatusConditions().Get(status.ConditionReady)
		return ready != nil && ready.IsFalse() && ready.Reason == v1alpha1.ReasonEncryptionKeyMissing, nil
	})
	if !strings.Contains(ready.Message, "e2e-state-key") {
		t.Errorf("message %q does not name the Secret", ready.Message)
	}
	create(t, ctx, deployment("pg", "e2e-pg", 1, "500m"))
	// Karpenter batches pending pods for up to 10s; give it that and more.
	time.Sleep(15 * time.Second)
	if ffs := fulfillments(t, ctx); len(ffs) != 0 {
		t.Fatalf("%d machines were bought for a nodeclass without its state key", len(ffs))
	}

	create(t, ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: "e2e-state-key"},
		Data: map[string][]byte{"passphrase": []byte(passphrase)}})
	eventually(t, ctx, 3*time.Minute, "the pod to be bound once the key exists", func(ctx context.Context) (bool, error) {
		return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": "pg"}, 1)
	})
	ffs := fulfillments(t, ctx)
	if len(ffs) != 1 {
		t.Fatalf("%d fulfillments, want 1", len(ffs))
	}
	f := ffs[0]
	db, err := sql.Open("postgres", conn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	var data string
	if err := db.QueryRowContext(ctx, `SELECT data FROM fulfiller.states WHERE name = $1`, f.Spec.StateKey).Scan(&data); err != nil {
		t.Fatalf("state row of %s: %v", f.Name, err)
	}
	if !strings.Contains(data, `"encrypted_data"`) || strings.Contains(data, "terraform_data") || strings.Contains(data, f.Spec.NodeName) {
		t.Errorf("the state row is not encrypted:\n%.300s", data)
	}
	secrets := &corev1.SecretList{}
	if err := env.kube.List(ctx, secrets, client.InNamespace(devenv.StateNamespace), client.MatchingLabels{"tfstate": "true"}); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d kubernetes state secrets for a pg class", len(secrets.Items))
	}
	if len(f.Status.Runs) == 0 {
		t.Fatal("no runs recorded")
	}
	runLog := runLog(t, f.Status.Runs[0])
	for _, secret := range []string{passphrase, conn} {
		if strings.Contains(runLog, secret) {
			t.Errorf("the run log holds a secret (%.10s...)", secret)
		}
	}

	// The class and its pool are deleted while the machine lives: its encrypted state in
	// PostgreSQL is destroyed with the key it recorded, and the class goes last.
	deleteClassesWithClaims(t, ctx, "e2e-pg")
	_ = env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pg"}})
	assertNoMachines(t)
	store := statelock.PGStore{ConnStr: conn, Schema: v1alpha1.DefaultPGSchema}
	if ok, err := store.Exists(ctx, statelock.Key(f.Spec.StateKey)); err != nil || ok {
		t.Errorf("state of %s after the destroy: exists=%v, %v", f.Name, ok, err)
	}
}

// TestClassDeletedWithLiveClaims: `kubectl delete -f nodeclass.yaml -f nodepool.yaml` while
// claims live, for a class with the kubernetes backend and one with encrypted states: every
// machine is destroyed (the encrypted one with the key it recorded), every state and lock
// removed, nothing wedges, and each class goes last. (TestEncryptedStatesInPostgres does the
// same for the pg backend.)
func TestClassDeletedWithLiveClaims(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	create(t, ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: "e2e-del-key"},
		Data: map[string][]byte{"passphrase": []byte("e2e class deletion passphrase")}})
	t.Cleanup(func() {
		_ = env.kube.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.Namespace, Name: "e2e-del-key"}})
	})
	plain := nodeClass("e2e-del", nodeType("del-small", "0.01", nil))
	encrypted := nodeClass("e2e-del-enc", nodeType("del-enc-small", "0.01", nil))
	encrypted.Spec.Backend.Encryption = &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "e2e-del-key", Key: "passphrase"}}
	for _, class := range []*v1alpha1.TofuNodeClass{plain, encrypted} {
		startScenario(t, ctx, class, nodePool(class.Name, class.Name))
		create(t, ctx, deployment(class.Name, class.Name, 1, "500m"))
	}
	for _, class := range []string{plain.Name, encrypted.Name} {
		eventually(t, ctx, 4*time.Minute, "the pod of "+class+" to be bound", func(ctx context.Context) (bool, error) {
			return devenv.PodsBound(ctx, env.kube, "default", map[string]string{"app": class}, 1)
		})
	}
	destroyed := deleteClassesWithClaims(t, ctx, plain.Name, encrypted.Name)
	for _, f := range destroyed {
		key := statelock.Key(f.Spec.StateKey)
		for _, obj := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.StateNamespace, Name: key.SecretName()}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: devenv.StateNamespace, Name: key.LeaseName()}},
		} {
			if err := env.kube.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				t.Errorf("state object %s of %s after its class was deleted: %v", obj.GetName(), f.Name, err)
			}
		}
	}
	for _, class := range []string{plain.Name, encrypted.Name} {
		_ = env.kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: class}})
	}
	eventually(t, ctx, time.Minute, "nothing of the classes' claims to be left", func(ctx context.Context) (bool, error) {
		ok, _, err := devenv.Drained(ctx, env.kube)
		return ok, err
	})
	assertNoMachines(t)
}

// deleteClassesWithClaims deletes classes and their pools (of the same names) while their
// claims live, with `kubectl delete -f nodeclass.yaml -f nodepool.yaml`, and waits until the
// classes are gone. Each class must go last: it says how many claims remain (an event, and
// its Terminating condition) until they are destroyed, and when it is gone no Fulfillment of
// it is left. It returns the claims that were live.
func deleteClassesWithClaims(t *testing.T, ctx context.Context, classes ...string) []v1alpha1.Fulfillment {
	t.Helper()
	var live []v1alpha1.Fulfillment
	dir := t.TempDir()
	var classFile, poolFile strings.Builder
	for _, class := range classes {
		n := 0
		for _, f := range fulfillments(t, ctx) {
			if f.Spec.NodeClass == class && f.DeletionTimestamp.IsZero() {
				live = append(live, f)
				n++
			}
		}
		if n == 0 {
			t.Fatalf("class %s has no live claim to delete it with", class)
		}
		fmt.Fprintf(&classFile, "---\napiVersion: %s/v1alpha1\nkind: TofuNodeClass\nmetadata:\n  name: %s\n", v1alpha1.Group, class)
		fmt.Fprintf(&poolFile, "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: %s\n", class)
	}
	for name, content := range map[string]string{"nodeclass.yaml": classFile.String(), "nodepool.yaml": poolFile.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kubectl(t, "delete", "--wait=false", "-f", filepath.Join(dir, "nodeclass.yaml"), "-f", filepath.Join(dir, "nodepool.yaml"))

	gone := map[string]bool{}
	eventually(t, ctx, 5*time.Minute, "the classes to be deleted after their claims", func(ctx context.Context) (bool, error) {
		for _, class := range classes {
			if gone[class] {
				continue
			}
			err := env.kube.Get(ctx, client.ObjectKey{Name: class}, &v1alpha1.TofuNodeClass{})
			if !apierrors.IsNotFound(err) {
				continue
			}
			if err := client.IgnoreNotFound(err); err != nil {
				return false, err
			}
			gone[class] = true
			for _, f := range fulfillments(t, ctx) {
				if f.Spec.NodeClass == class {
					t.Errorf("class %s went before its claim %s (phase %s)", class, f.Name, f.Status.Phase)
				}
			}
		}
		return len(gone) == len(classes), nil
	})
	for _, class := range classes {
		events := &corev1.EventList{}
		if err := env.kube.List(ctx, events, client.MatchingFields{"involvedObject.name": class}); err != nil {
			t.Fatal(err)
		}
		said := false
		for _, e := range events.Items {
			said = said || (e.Reason == v1alpha1.ReasonClaimsRemaining && strings.Contains(e.Message, "waiting for"))
		}
		if !said {
			t.Errorf("class %s never said that it waited for its claims", class)
		}
	}
	return live
}
