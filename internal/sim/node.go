// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// What the simulated kubelet reports about itself.
const (
	KubeletVersion          = "v1.36.3"
	ContainerRuntimeVersion = "containerd://2.1.4"
	OSImage                 = "Ubuntu 24.04.3 LTS (fulfiller simulated machine)"
	KernelVersion           = "6.8.0-sim"
	kubeletPort             = 10250
	// minLeaseDuration is the kubelet's default nodeLeaseDurationSeconds.
	minLeaseDuration = 40 * time.Second
)

// Labels the kubelet puts on its Node besides --node-labels.
const (
	betaLabelOS   = "beta.kubernetes.io/os"
	betaLabelArch = "beta.kubernetes.io/arch"
)

// register creates the machine's Node as the node itself, or reuses it when the machine is
// restarting, and reports the Node's full status.
func (m *machine) register(ctx context.Context) (*corev1.Node, error) {
	nodes := m.client.CoreV1().Nodes()
	m.bootID = randomHex(16)
	m.registered = time.Now()
	m.refreshInjected()
	want := m.nodeObject()
	var node *corev1.Node
	err := retryTransient(ctx, func(ctx context.Context) error {
		var err error
		node, err = nodes.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			node, err = nodes.Get(ctx, m.nodeName, metav1.GetOptions{})
			if err == nil {
				m.log.printf("Node %s exists already (a restart): reusing it", m.nodeName)
				node, err = m.postStatus(ctx, node, true)
			}
			return err
		}
		if err == nil {
			m.log.printf("registered Node %s with provider ID %q, taints %v", m.nodeName, node.Spec.ProviderID, taintStrings(node.Spec.Taints))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("registering Node %s: %w", m.nodeName, err)
	}
	return node, nil
}

// nodeObject is the Node the kubelet registers: provider ID, labels and taints from its
// flags (kubeadm writes them from the JoinConfiguration), its well-known labels, and status.
func (m *machine) nodeObject() *corev1.Node {
	reg := m.join.NodeRegistration
	labels := map[string]string{}
	if v, ok := reg.Arg("node-labels"); ok {
		maps.Copy(labels, bootstrap.ParseNodeLabels(v))
	}
	maps.Copy(labels, map[string]string{
		corev1.LabelHostname:   m.nodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		betaLabelOS:            "linux",
		betaLabelArch:          "amd64",
	})
	providerID, _ := reg.Arg("provider-id")
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        m.nodeName,
			Labels:      labels,
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: corev1.NodeSpec{ProviderID: providerID, Taints: append([]corev1.Taint(nil), reg.Taints...)},
	}
	now := metav1.Now()
	capacity := m.capacity()
	node.Status = corev1.NodeStatus{
		Capacity:        capacity,
		Allocatable:     m.allocatable(capacity, time.Now()),
		Conditions:      m.conditions(now, nil),
		Addresses:       m.addresses(),
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kubeletPort}},
		NodeInfo:        m.nodeInfo(),
	}
	return node
}

func (m *machine) capacity() corev1.ResourceList {
	capacity := m.cfg.Capacity.DeepCopy()
	if capacity == nil {
		capacity = corev1.ResourceList{}
	}
	if _, ok := capacity[corev1.ResourcePods]; !ok {
		capacity[corev1.ResourcePods] = *resource.NewQuantity(DefaultPods, resource.DecimalSI)
	}
	return capacity
}

// allocatable is the capacity less what the kubelet reserves (nodeAllocatable), with the
// extended resources (GPUs) at 0 until the simulated device plugin has registered.
func (m *machine) allocatable(capacity corev1.ResourceList, now time.Time) corev1.ResourceList {
	out := m.allocatableBase.DeepCopy()
	if out == nil {
		out = capacity.DeepCopy()
	}
	if m.gpuPluginUp(now) {
		return out
	}
	for name := range out {
		if strings.Contains(string(name), "/") && !strings.Contains(string(name), "kubernetes.io/") {
			out[name] = *resource.NewQuantity(0, resource.DecimalSI)
		}
	}
	return out
}

// cniUp and gpuPluginUp: whether the simulated network plugin and device plugin are up.
func (m *machine) cniUp(now time.Time) bool {
	return !m.cfg.CNINever && now.Sub(m.registered) >= m.cfg.CNIDelay
}

func (m *machine) gpuPluginUp(now time.Time) bool {
	return !m.cfg.GPUNever && now.Sub(m.registered) >= m.cfg.GPUDelay
}

// pluginsPending reports whether a simulated plugin is still due to come up, and when.
func (m *machine) pluginsPending(now time.Time) (time.Duration, bool) {
	var next time.Duration
	pending := false
	for _, p := range []struct {
		up    bool
		never bool
		delay time.Duration
	}{{m.cniUp(now), m.cfg.CNINever, m.cfg.CNIDelay}, {m.gpuPluginUp(now), m.cfg.GPUNever, m.cfg.GPUDelay}} {
		if p.up || p.never {
			continue
		}
		wait := m.registered.Add(p.delay).Sub(now)
		if !pending || wait < next {
			next = wait
		}
		pending = true
	}
	return next, pending
}

func (m *machine) addresses() []corev1.NodeAddress {
	if len(m.cfg.Addresses) > 0 {
		return append([]corev1.NodeAddress(nil), m.cfg.Addresses...)
	}
	return []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: corev1.NodeHostName, Address: m.nodeName},
	}
}

func (m *machine) nodeInfo() corev1.NodeSystemInfo {
	// /etc/machine-id and the DMI UUID belong to the machine; the boot ID changes every boot.
	id := sha256.Sum256([]byte(m.cfg.Name))
	u := hex.EncodeToString(id[16:32])
	return corev1.NodeSystemInfo{
		MachineID:               hex.EncodeToString(id[:16]),
		SystemUUID:              u[0:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:32],
		BootID:                  m.bootID,
		KernelVersion:           KernelVersion,
		OSImage:                 OSImage,
		ContainerRuntimeVersion: ContainerRuntimeVersion,
		KubeletVersion:          KubeletVersion,
		OperatingSystem:         "linux",
		Architecture:            "amd64",
	}
}

// conditions are a healthy kubelet's node conditions, heartbeat now; a condition keeps its
// transition time from current when its status did not change.
func (m *machine) conditions(now metav1.Time, current []corev1.NodeCondition) []corev1.NodeCondition {
	want := []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
	}
	if m.cfg.CNIDelay > 0 || m.cfg.CNINever {
		// A machine with a modelled network plugin reports it as a real one would: the
		// kubelet not Ready until the plugin is initialized, and NetworkUnavailable set by it.
		if m.cniUp(now.Time) {
			want = append(want, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "CNIIsUp", Message: "network plugin is running on this node"})
		} else {
			want[3] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
				Message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"}
			want = append(want, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated", Message: "network plugin is not running"})
		}
	}
	want = m.applyInjected(want)
	for i := range want {
		want[i].LastHeartbeatTime = now
		want[i].LastTransitionTime = now
		for _, c := range current {
			if c.Type == want[i].Type && c.Status == want[i].Status && !c.LastTransitionTime.IsZero() {
				want[i].LastTransitionTime = c.LastTransitionTime
			}
		}
	}
	return want
}

// postStatus patches the Node's status as the kubelet does: the conditions with a fresh
// heartbeat, and with full, everything else it reports too.
func (m *machine) postStatus(ctx context.Context, node *corev1.Node, full bool) (*corev1.Node, error) {
	status := corev1.NodeStatus{Conditions: m.conditions(metav1.Now(), node.Status.Conditions)}
	if full {
		fresh := m.nodeObject().Status
		fresh.Conditions = status.Conditions
		status = fresh
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, fmt.Errorf("encoding status patch: %w", err)
	}
	updated, err := m.client.CoreV1().Nodes().PatchStatus(ctx, m.nodeName, patch)
	if err != nil {
		return nil, fmt.Errorf("patching Node %s status: %w", m.nodeName, err)
	}
	return updated, nil
}

// heartbeat keeps the node alive until ctx ends: the Lease every interval, the status every
// statusEvery intervals. Failures are logged and retried on the next beat, as a kubelet does.
func (m *machine) heartbeat(ctx context.Context, node *corev1.Node) error {
	if err := m.renewLease(ctx, node); err != nil {
		m.log.printf("renewing Lease: %v", err)
	}
	m.log.printf("kubelet running: Node %s is Ready=%t, renewing its Lease every %s", m.nodeName, m.cniUp(time.Now()), m.cfg.HeartbeatInterval)
	ticker := time.NewTicker(m.cfg.HeartbeatInterval)
	defer ticker.Stop()
	plugins := m.pluginTimer()
	for beat := 1; ; beat++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-plugins:
			// A plugin came up: report the whole status now, as the kubelet does on a change.
			m.log.printf("plugins up: network %t, device plugin %t", m.cniUp(time.Now()), m.gpuPluginUp(time.Now()))
			if current, err := m.client.CoreV1().Nodes().Get(ctx, m.nodeName, metav1.GetOptions{}); err == nil {
				if current, err = m.postStatus(ctx, current, true); err == nil {
					node = current
				}
			} else if ctx.Err() == nil {
				m.log.printf("posting node status: %v", err)
			}
			plugins = m.pluginTimer()
			beat--
			continue
		case <-ticker.C:
		}
		if err := m.renewLease(ctx, node); err != nil && ctx.Err() == nil {
			m.log.printf("renewing Lease: %v", err)
		}
		// An injected condition is reported at once, as the kubelet reports a change.
		if changed := m.refreshInjected(); beat%statusEvery != 0 && !changed {
			continue
		}
		current, err := m.client.CoreV1().Nodes().Get(ctx, m.nodeName, metav1.GetOptions{})
		if err == nil {
			current, err = m.postStatus(ctx, current, false)
		}
		if err != nil {
			if ctx.Err() == nil {
				m.log.printf("posting node status: %v", err)
			}
			continue
		}
		node = current
	}
}

// pluginTimer fires when the next simulated plugin comes up; nil (never) when none is due.
func (m *machine) pluginTimer() <-chan time.Time {
	wait, pending := m.pluginsPending(time.Now())
	if !pending {
		return nil
	}
	return time.After(max(wait, 0) + 10*time.Millisecond)
}

// renewLease renews (or creates) the node's Lease in kube-node-lease, owned by its Node.
func (m *machine) renewLease(ctx context.Context, node *corev1.Node) error {
	leases := m.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	duration := int32(max(minLeaseDuration, statusEvery*m.cfg.HeartbeatInterval) / time.Second)
	lease, err := leases.Get(ctx, m.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: m.nodeName, Namespace: corev1.NamespaceNodeLease}}
		if node != nil && node.UID != "" {
			lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		}
		lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: &m.nodeName, LeaseDurationSeconds: &duration, RenewTime: &now}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.HolderIdentity = &m.nodeName
	lease.Spec.LeaseDurationSeconds = &duration
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// retryTransient calls fn until it succeeds, fails for good (the API server refused the
// request) or ctx ends.
func retryTransient(ctx context.Context, fn func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		last = fn(ctx)
		switch {
		case last == nil:
			return true, nil
		case apierrors.IsForbidden(last), apierrors.IsInvalid(last), apierrors.IsUnauthorized(last), apierrors.IsBadRequest(last):
			return false, last
		default:
			return false, nil
		}
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

func taintStrings(taints []corev1.Taint) []string {
	out := make([]string, 0, len(taints))
	for _, t := range taints {
		out = append(out, t.ToString())
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
