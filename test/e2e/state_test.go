package e2e

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
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

	cleanup(t, "pg", "e2e-pg", "e2e-pg")
	store := statelock.PGStore{ConnStr: conn, Schema: v1alpha1.DefaultPGSchema}
	if ok, err := store.Exists(ctx, statelock.Key(f.Spec.StateKey)); err != nil || ok {
		t.Errorf("state of %s after the destroy: exists=%v, %v", f.Name, ok, err)
	}
}
