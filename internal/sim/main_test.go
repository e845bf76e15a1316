// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// testMainEnv makes the test binary act as the `fulfiller` binary: Start re-executes it, and
// the module's provisioners run it as $FULFILLER_BINARY.
const testMainEnv = "SIM_TEST_MAIN"

var controlPlane *testenv.ControlPlane

func TestMain(m *testing.M) {
	if os.Getenv(testMainEnv) == "1" {
		args := os.Args[1:]
		if len(args) > 0 && args[0] == "sim" {
			args = args[1:]
		}
		os.Exit(Main(args))
	}
	// Every re-execution of this binary (by Start, or by tofu) is `fulfiller`.
	os.Setenv(testMainEnv, "1")
	os.Exit(testenv.RunMain(m, &controlPlane, testenv.Options{CRDs: testenv.DefaultCRDs()}))
}

func admin(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(controlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// mintToken creates a bootstrap token Secret expiring at expires, as the controller does.
func mintToken(ctx context.Context, t *testing.T, expires time.Time) bootstrap.Token {
	t.Helper()
	tok, err := testenv.MintToken(ctx, admin(t), expires, "sim "+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

var testTaints = []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}}

var testLabels = map[string]string{
	"karpenter.sh/nodepool":            "default",
	"node.kubernetes.io/instance-type": "sim-small",
	"topology.kubernetes.io/zone":      "zone-a",
}

// joinSpec is what the controller renders for a claim named name.
func joinSpec(t *testing.T, name string, tok bootstrap.Token) bootstrap.JoinSpec {
	t.Helper()
	hash, err := bootstrap.CACertHash(controlPlane.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	return bootstrap.JoinSpec{
		APIServerEndpoint: strings.TrimPrefix(controlPlane.Server, "https://"),
		Token:             tok,
		CACertHash:        hash,
		NodeName:          name,
		ProviderID:        "sim://" + name,
		Labels:            testLabels,
		Taints:            testTaints,
	}
}

func renderUserData(t *testing.T, spec bootstrap.JoinSpec) []byte {
	t.Helper()
	data, err := bootstrap.RenderUserData(spec)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeUserData(t *testing.T, dir string, spec bootstrap.JoinSpec) string {
	t.Helper()
	path := filepath.Join(dir, "user-data")
	if err := os.WriteFile(path, renderUserData(t, spec), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func testCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("4Gi"),
		"nvidia.com/gpu":      resource.MustParse("1"),
	}
}

// waitForNode polls until the Node exists and cond holds.
func waitForNode(ctx context.Context, t *testing.T, name string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := admin(t).CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		node = n
		return cond(n), nil
	})
	if err != nil {
		t.Fatalf("waiting for Node %s: %v (last seen: %v)", name, err, node != nil)
	}
	return node
}

func nodeReady(n *corev1.Node) bool {
	c := condition(n, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func condition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// waitForLog polls until the log holds substr.
func waitForLog(ctx context.Context, t *testing.T, log interface{ String() string }, substr string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return strings.Contains(log.String(), substr), nil
	})
	if err != nil {
		t.Fatalf("log never showed %q: %v\n%s", substr, err, log.String())
	}
}

// machineRun is a machine running in the background of a test.
type machineRun struct {
	log    *testenv.SyncBuffer
	cancel context.CancelFunc
	done   chan error
}

func startMachine(t *testing.T, cfg MachineConfig) *machineRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &machineRun{log: &testenv.SyncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- RunMachine(ctx, cfg, r.log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Logf("machine stopped: %v", err)
		}
	})
	return r
}

// powerOff cancels the machine and returns what RunMachine returned.
func (r *machineRun) powerOff(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("RunMachine did not return within 10s of power-off")
		return nil
	}
}

// wait returns RunMachine's result, bounded by d.
func (r *machineRun) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(d):
		t.Fatalf("RunMachine did not return within %s; log:\n%s", d, r.log.String())
		return nil
	}
}
