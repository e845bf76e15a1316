// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// RunMain starts one control plane for a test package, runs its tests and stops it, whatever
// they do. Tools that are missing fail the package: nothing is skipped.
func RunMain(m *testing.M, into **ControlPlane, opts Options) int {
	cp, err := Start(context.Background(), opts)
	if err != nil {
		os.Stderr.WriteString("testenv: starting the control plane: " + err.Error() + "\n")
		return 1
	}
	*into = cp
	code := m.Run()
	if err := cp.Stop(); err != nil {
		os.Stderr.WriteString("testenv: stopping the control plane: " + err.Error() + "\n")
		if code == 0 {
			code = 1
		}
	}
	return code
}

// MintToken creates a bootstrap token Secret expiring at expires, as the controller does.
func MintToken(ctx context.Context, cs kubernetes.Interface, expires time.Time, description string) (bootstrap.Token, error) {
	tok, err := bootstrap.NewToken()
	if err != nil {
		return bootstrap.Token{}, err
	}
	secret := bootstrap.TokenSecret(tok, bootstrap.TokenSecretOptions{Expires: expires, Description: description})
	if _, err := cs.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return bootstrap.Token{}, fmt.Errorf("creating token secret: %w", err)
	}
	return tok, nil
}

// SyncBuffer is a log that tests read while something else writes it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// StartT starts a control plane for one test (or benchmark) and stops it when the test ends;
// a control plane that does not start fails the test.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	cp, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	return cp
}

// PostgresT starts a PostgreSQL server for one test, creates database name in it and returns
// its connection string; the server stops when the test ends. A missing PostgreSQL fails the
// test.
func PostgresT(t testing.TB, name string) string {
	t.Helper()
	ctx := context.Background()
	pg, err := StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.Stop(); err != nil {
			t.Error(err)
		}
	})
	conn, err := pg.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// Eventually polls cond every 50 ms until it holds, and fails the test when timeout passes
// first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ReadFile returns the content of path, and fails the test when it cannot be read.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// GoModVersion is the version the repository's go.mod requires of a module (a test binary
// has no build information of its modules).
func GoModVersion(t testing.TB, module string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("go.mod does not require %s", module)
	return ""
}
