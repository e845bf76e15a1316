// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

func pgBackend() tfrunner.Backend {
	return tfrunner.Backend{Type: "pg", Config: statelock.PGBackend("fulfiller")}
}

// TestPGBackend applies and destroys modules/sim with the pg backend against a real
// PostgreSQL, one workspace per claim in one schema: the store sees the state, no lock after
// the runs, the row in plain sight only as ciphertext when encrypted, and Remove deletes it.
func TestPGBackend(t *testing.T) {
	ctx := context.Background()
	conn := testenv.PostgresT(t, "states")
	store := statelock.PGStore{ConnStr: conn, Schema: "fulfiller"}
	env := statelock.PGConnEnv(conn)
	encEnv, err := statelock.EncryptionEnv(pgPassphrase, "aes_gcm")
	if err != nil {
		t.Fatal(err)
	}
	encrypted := map[string]string{}
	for k, v := range env {
		encrypted[k] = v
	}
	for k, v := range encEnv {
		encrypted[k] = v
	}

	// Before any run the schema does not exist: no state, no lock.
	if ok, err := store.Exists(ctx, "pg-a"); err != nil || ok {
		t.Fatalf("Exists before any run = %v, %v", ok, err)
	}
	if h, err := store.LockHolder(ctx, "pg-a"); err != nil || h != nil {
		t.Fatalf("LockHolder before any run = %+v, %v", h, err)
	}

	// Two claims, one of them encrypted, side by side in one schema.
	for _, claim := range []struct {
		key string
		env map[string]string
	}{{"pg-a", env}, {"pg-b", encrypted}} {
		res, log := run(t, ctx, simRun(t, claim.key, tfrunner.Apply, pgBackend(), claim.key, claim.env, nil))
		if !res.Succeeded || res.ProviderID == "" {
			t.Fatalf("apply %s: %+v\n%s", claim.key, res.Error, log)
		}
		if strings.Contains(log, "postgres://") {
			t.Errorf("run log of %s shows the connection string", claim.key)
		}
	}
	db, err := sql.Open("postgres", conn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	stateOf := func(key string) string {
		t.Helper()
		var data string
		if err := db.QueryRowContext(ctx, `SELECT data FROM fulfiller.states WHERE name = $1`, key).Scan(&data); err != nil {
			t.Fatalf("state row of %s: %v", key, err)
		}
		return data
	}
	if a := stateOf("pg-a"); !strings.Contains(a, "terraform_data") || !strings.Contains(a, userDataHash()) {
		t.Errorf("state of pg-a is not the claim's plain state:\n%.300s", a)
	}
	if b := stateOf("pg-b"); strings.Contains(b, "terraform_data") || strings.Contains(b, userDataHash()) || !strings.Contains(b, `"encrypted_data"`) {
		t.Errorf("state of pg-b is not encrypted:\n%.300s", b)
	}
	for _, key := range []statelock.Key{"pg-a", "pg-b"} {
		if ok, err := store.Exists(ctx, key); err != nil || !ok {
			t.Errorf("Exists(%s) = %v, %v", key, ok, err)
		}
		if h, err := store.LockHolder(ctx, key); err != nil || h != nil {
			t.Errorf("LockHolder(%s) after the run = %+v, %v", key, h, err)
		}
	}

	res, log := run(t, ctx, simRun(t, "pg-b", tfrunner.Destroy, pgBackend(), "pg-b", encrypted, nil))
	if !res.Succeeded {
		t.Fatalf("destroy pg-b: %+v\n%s", res.Error, log)
	}
	if err := store.Remove(ctx, "pg-b"); err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Exists(ctx, "pg-b"); err != nil || ok {
		t.Errorf("Exists after Remove = %v, %v", ok, err)
	}
	if ok, err := store.Exists(ctx, "pg-a"); err != nil || !ok {
		t.Errorf("Remove of pg-b touched pg-a: %v, %v", ok, err)
	}
}

// TestPGBackendLocking: while one run holds a claim's state, the store names the holder and a
// second run fails with StateLocked; a runner killed mid-apply (SIGKILL, no chance to unlock)
// leaves no lock behind, because PostgreSQL ends its session's advisory locks, so the next
// run gets the lock.
func TestPGBackendLocking(t *testing.T) {
	ctx := context.Background()
	conn := testenv.PostgresT(t, "states")
	store := statelock.PGStore{ConnStr: conn, Schema: "fulfiller"}
	env := statelock.PGConnEnv(conn)

	// Create the claim's workspace with a first apply, so the lock is the row's.
	const key = "pg-locked"
	res, log := run(t, ctx, simRun(t, key, tfrunner.Apply, pgBackend(), key, env, nil))
	if !res.Succeeded {
		t.Fatalf("first apply: %+v\n%s", res.Error, log)
	}

	// A runner process (this test binary) applies slowly, holding the lock.
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	local := &executor.Local{Dir: dir, Command: []string{exe}, Env: []string{runnerEnv + "=1"}, Grace: 20 * time.Second}
	slow := simRun(t, key, tfrunner.Apply, pgBackend(), key, env, map[string]string{"apply_delay": "30"})
	slow.Name = "pg-locked-slow"
	slow.Variables[tfrunner.VarNodeType] = "sim-large" // a change, so the apply does work under the lock
	if err := local.Start(ctx, slow); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, slow.Name)
	pid := 0
	t.Cleanup(func() {
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	testenv.Eventually(t, 60*time.Second, "the slow run to hold the lock", func() bool {
		data, _ := os.ReadFile(filepath.Join(runDir, executor.LogFileName))
		return provisioning(string(data))
	})
	holder, err := store.LockHolder(ctx, key)
	if err != nil || holder == nil || !strings.HasPrefix(holder.ID, "pg-pid-") || !strings.HasPrefix(holder.Who, "postgres@") {
		t.Fatalf("LockHolder during the slow run = %+v, %v", holder, err)
	}
	t.Logf("holder: %+v", holder)

	res, log = run(t, ctx, simRun(t, key, tfrunner.Apply, pgBackend(), key, env, nil))
	if res.Succeeded || res.Error.Class != tfrunner.LockHeld || !res.Error.Class.Retryable() {
		t.Fatalf("concurrent apply: %+v, want %s\n%s", res.Error, tfrunner.LockHeld, log)
	}
	t.Logf("concurrent apply: %s", res.Error)

	// Kill the runner's process group (runner and tofu) as a node failure would.
	data, err := os.ReadFile(filepath.Join(runDir, executor.PIDFileName))
	if err != nil {
		t.Fatal(err)
	}
	if pid, err = strconv.Atoi(strings.TrimSpace(string(data))); err != nil || pid <= 0 {
		t.Fatalf("runner pid %q: %v", data, err)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the killed run's lock to go", func() bool {
		h, err := store.LockHolder(ctx, key)
		return err == nil && h == nil
	})
	res, log = run(t, ctx, simRun(t, key, tfrunner.Apply, pgBackend(), key, env, nil))
	if !res.Succeeded {
		t.Fatalf("apply after the killed run: %+v\n%s", res.Error, log)
	}
}

// TestPGConnectionStringNeverShown: a connection string whose password has an '@' or '#' that
// is not percent-encoded breaks lib/pq's URL parsing, whose errors quote the URL or a part of
// it cut at the '#' (or connect to a host made of a piece of the password). Whatever the run's
// outcome, neither the password nor a piece of it is in the run log, the error message or the
// termination message; nor is the state passphrase, which is in the run's environment too.
func TestPGConnectionStringNeverShown(t *testing.T) {
	ctx := context.Background()
	conn := testenv.PostgresT(t, "states")
	good, err := url.Parse(conn)
	if err != nil {
		t.Fatal(err)
	}
	encEnv, err := statelock.EncryptionEnv(pgPassphrase, "aes_gcm")
	if err != nil {
		t.Fatal(err)
	}
	for i, password := range []string{
		"hunter2-at@host-looking#and-hash",
		"only-an-at@sign-in-it",
		"a-hash-#-in-the-middle",
		`quote"and\backslash@db`,
	} {
		bad := "postgres://postgres:" + password + "@" + good.Host + good.Path + "?sslmode=disable"
		env := map[string]string{statelock.PGConnEnvVar: bad}
		for k, v := range encEnv {
			env[k] = v
		}
		key := statelock.Key(fmt.Sprintf("pg-leak-%d", i))
		res, log := run(t, ctx, simRun(t, string(key), tfrunner.Apply, pgBackend(), string(key), env, nil))
		msg := ""
		if res.Error != nil {
			msg = res.Error.Message
		}
		term, err := tfrunner.TerminationMessage(res)
		if err != nil {
			t.Fatal(err)
		}
		pieces := []string{password, pgPassphrase}
		for _, p := range strings.FieldsFunc(password, func(r rune) bool { return strings.ContainsRune(`@#/?"\`, r) }) {
			if len(p) >= 6 {
				pieces = append(pieces, p)
			}
		}
		for _, p := range pieces {
			for what, text := range map[string]string{"run log": log, "error message": msg, "termination message": string(term)} {
				if strings.Contains(text, p) {
					t.Errorf("password %d: the %s shows %q:\n%s", i, what, p, text)
				}
			}
		}
		t.Logf("password %d: succeeded=%v %v", i, res.Succeeded, res.Error)
	}
}
