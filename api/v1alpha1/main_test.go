// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// shared is the package's control plane with the CRDs, started by the first test that needs
// it (the CRDs' validation rules) and stopped after the last.
var shared struct {
	once sync.Once
	cp   *testenv.ControlPlane
	kube client.Client
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cp != nil {
		if err := shared.cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// apiServer is a client of a real API server that serves the CRDs.
func apiServer(t *testing.T) client.Client {
	t.Helper()
	shared.once.Do(func() {
		if shared.cp, shared.err = testenv.Start(context.Background(), testenv.Options{CRDs: testenv.DefaultCRDs()}); shared.err != nil {
			return
		}
		scheme := runtime.NewScheme()
		if shared.err = v1alpha1.AddToScheme(scheme); shared.err != nil {
			return
		}
		shared.kube, shared.err = client.New(shared.cp.Config, client.Options{Scheme: scheme})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.kube
}
