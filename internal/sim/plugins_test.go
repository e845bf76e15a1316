// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// TestSlowPlugins: a machine with a slow network plugin and a slow GPU device plugin registers
// its Node with the readiness taints from its (compressed) user data, NotReady with
// NetworkUnavailable and no allocatable GPU; once each plugin is up, the Node says so.
func TestSlowPlugins(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "sim-slow-plugins"
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	spec := joinSpec(t, name, tok)
	spec.Taints = append(slices.Clone(testTaints),
		corev1.Taint{Key: "readiness.k8s.io/fulfiller.sh-cni", Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: "readiness.k8s.io/fulfiller.sh-gpu", Effect: corev1.TaintEffectNoSchedule})
	plain := renderUserData(t, spec)
	// A limit just under the plain size: the machine gets gzip+base64 user data.
	packed, err := bootstrap.FitUserData(plain, int64(len(plain)-1))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(string(packed), "#cloud-config") {
		t.Fatal("user data was not compressed")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "user-data")
	if err := os.WriteFile(path, packed, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := MachineConfig{
		Name: name, UserDataPath: path, Capacity: testCapacity(),
		HeartbeatInterval: time.Second, StateDir: filepath.Join(dir, "state"),
		CNIDelay: 3 * time.Second, GPUDelay: 5 * time.Second,
	}
	startMachine(t, cfg)
	node := waitForNode(ctx, t, name, func(*corev1.Node) bool { return true })
	for _, key := range []string{"karpenter.sh/unregistered", "readiness.k8s.io/fulfiller.sh-cni", "readiness.k8s.io/fulfiller.sh-gpu"} {
		if !slices.ContainsFunc(node.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == key }) {
			t.Errorf("registered without taint %s: %v", key, node.Spec.Taints)
		}
	}
	if c := condition(node, corev1.NodeReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "KubeletNotReady" {
		t.Errorf("Ready at registration = %+v, want False/KubeletNotReady", c)
	}
	if c := condition(node, corev1.NodeNetworkUnavailable); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("NetworkUnavailable at registration = %+v, want True", c)
	}
	if got := node.Status.Allocatable["nvidia.com/gpu"]; !got.IsZero() {
		t.Errorf("GPU allocatable at registration = %s, want 0", got.String())
	}
	if got := node.Status.Capacity["nvidia.com/gpu"]; got.String() != "1" {
		t.Errorf("GPU capacity = %s, want 1", got.String())
	}
	node = waitForNode(ctx, t, name, nodeReady)
	if c := condition(node, corev1.NodeNetworkUnavailable); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("NetworkUnavailable once the CNI is up = %+v, want False", c)
	}
	waitForNode(ctx, t, name, func(n *corev1.Node) bool {
		got := n.Status.Allocatable["nvidia.com/gpu"]
		return got.String() == "1"
	})
}

// TestPluginsNever: a plugin that never comes up is never due.
func TestPluginsNever(t *testing.T) {
	reg := time.Now()
	for _, tc := range []struct {
		name     string
		cfg      MachineConfig
		at       time.Duration
		cni, gpu bool
		pending  bool
		next     time.Duration
	}{
		{name: "default: up at once", cni: true, gpu: true},
		{name: "both slow", cfg: MachineConfig{CNIDelay: 10 * time.Second, GPUDelay: 20 * time.Second}, at: 5 * time.Second, pending: true, next: 5 * time.Second},
		{name: "cni up, gpu due", cfg: MachineConfig{CNIDelay: 10 * time.Second, GPUDelay: 20 * time.Second}, at: 15 * time.Second, cni: true, pending: true, next: 5 * time.Second},
		{name: "gpu never", cfg: MachineConfig{GPUNever: true}, at: time.Hour, cni: true},
		{name: "cni never, gpu slow", cfg: MachineConfig{CNINever: true, GPUDelay: time.Minute}, at: 30 * time.Second, pending: true, next: 30 * time.Second},
	} {
		m := &machine{cfg: tc.cfg, registered: reg}
		now := reg.Add(tc.at)
		next, pending := m.pluginsPending(now)
		if m.cniUp(now) != tc.cni || m.gpuPluginUp(now) != tc.gpu || pending != tc.pending || next != tc.next {
			t.Errorf("%s: cni %v gpu %v pending %v next %s, want %v %v %v %s", tc.name, m.cniUp(now), m.gpuPluginUp(now), pending, next, tc.cni, tc.gpu, tc.pending, tc.next)
		}
		alloc := m.allocatable(testCapacity(), now)
		if got := alloc["nvidia.com/gpu"]; (got.String() == "1") != tc.gpu {
			t.Errorf("%s: GPU allocatable %s with the device plugin up=%v", tc.name, got.String(), tc.gpu)
		}
		if got := alloc[corev1.ResourceCPU]; got.String() != "2" {
			t.Errorf("%s: cpu allocatable %s", tc.name, got.String())
		}
	}
}
