// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// simModule is the shipped simulated node type.
func simModule(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "modules", "sim"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// simRequest is an apply of modules/sim with local state; params are merged over sim_dir.
func simRequest(t *testing.T, name string, params map[string]string) Request {
	t.Helper()
	p := map[string]string{"sim_dir": t.TempDir()}
	for k, v := range params {
		p[k] = v
	}
	return Request{
		Name:      name,
		Operation: Apply,
		ModuleDir: simModule(t),
		WorkDir:   t.TempDir(),
		Backend:   Backend{Type: "local", Config: map[string]string{"path": filepath.Join(t.TempDir(), "state.tfstate")}},
		Variables: map[string]any{
			VarNodeName:   name,
			VarNodeType:   "sim-small",
			VarZone:       "sim-1",
			VarUserData:   testUserData,
			VarLabels:     map[string]string{},
			VarParameters: p,
		},
		TofuPath: tofuPath(t),
	}
}

// TestFailureClassesOnRealRuns provokes the generic failure classes with real tofu runs of the
// shipped simulated module (and a broken module, and a held kubernetes-backend lock against a
// real API server) and checks the class the run reports, which is the reason users see. The
// classes of the simulated cloud's error codes are the sim family's (internal/providers/sim).
func TestFailureClassesOnRealRuns(t *testing.T) {
	cp := testenv.StartT(t, testenv.Options{})
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		params map[string]string
		// edit changes the request; it may return a context for the run.
		edit  func(t *testing.T, r *Request, log *testenv.SyncBuffer) context.Context
		class ErrorClass
		want  string // in the message
	}{
		{name: "invalid module input", params: map[string]string{"apply_delay": "soon"}, class: InvalidModule,
			want: "parameters.apply_delay must be a number of seconds"},
		{name: "broken hcl", class: InvalidModule, edit: func(t *testing.T, r *Request, log *testenv.SyncBuffer) context.Context {
			r.ModuleDir = moduleDir(t, "syntax-error")
			return nil
		}},
		{name: "deadline", params: map[string]string{"apply_delay": "60"}, class: Timeout, want: "deadline",
			edit: func(t *testing.T, r *Request, log *testenv.SyncBuffer) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				t.Cleanup(cancel)
				return ctx
			}},
		{name: "cancelled", params: map[string]string{"apply_delay": "60"}, class: Cancelled, want: "cancelled",
			edit: func(t *testing.T, r *Request, log *testenv.SyncBuffer) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				go func() {
					// Cancel once tofu sits in the simulated API call.
					for ctx.Err() == nil {
						if provisioning(log.String()) {
							cancel()
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
				return ctx
			}},
		{name: "state locked", class: LockHeld, want: "already locked by another tofu client",
			edit: func(t *testing.T, r *Request, log *testenv.SyncBuffer) context.Context {
				key := statelock.Key("classes-locked")
				holdLease(t, cs, key)
				r.Backend = Backend{Type: "kubernetes", Config: statelock.KubernetesBackend(key, "default")}
				r.Env = map[string]string{"KUBE_CONFIG_PATH": cp.Kubeconfig}
				return nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := simRequest(t, "classes-"+strings.ReplaceAll(tc.name, " ", "-"), tc.params)
			runCtx := context.Background()
			log := &testenv.SyncBuffer{}
			if tc.edit != nil {
				if c := tc.edit(t, &req, log); c != nil {
					runCtx = c
				}
			}
			res := Run(runCtx, req, log, nil)
			if res.Succeeded || res.Error == nil {
				t.Fatalf("run succeeded:\n%s", log.String())
			}
			if res.Error.Class != tc.class || !strings.Contains(res.Error.Message, tc.want) {
				t.Errorf("error = %v, want class %s with %q\n%s", res.Error, tc.class, tc.want, log.String())
			}
			if strings.Contains(res.Error.Message, "\n") || len(res.Error.Message) > v1alpha1.MaxMessageLength {
				t.Errorf("message is not one bounded line: %q", res.Error.Message)
			}
			assertNoSecret(t, "run log", log.String())
			assertNoSecret(t, "error message", res.Error.Message)
		})
	}
}

// holdLease makes the kubernetes backend's lock of key look held by another run, as a runner
// killed mid-apply leaves it.
func holdLease(t *testing.T, cs kubernetes.Interface, key statelock.Key) {
	t.Helper()
	info, err := json.Marshal(map[string]any{"ID": "5d1f0c3a-0000-4000-8000-000000000001", "Operation": "OperationTypeApply",
		"Who": "runner@elsewhere", "Version": "1.12.6", "Created": time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: key.LeaseName(), Namespace: "default",
			Annotations: map[string]string{"app.terraform.io/lock-info": string(info)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("5d1f0c3a-0000-4000-8000-000000000001")},
	}
	if _, err := cs.CoordinationV1().Leases("default").Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
