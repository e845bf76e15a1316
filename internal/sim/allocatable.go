// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// kubeletDefaultEvictionHard is the kubelet's --eviction-hard when it is not given
// (k8s.io/kubernetes pkg/kubelet/eviction/defaults_linux.go); the flag replaces it whole.
var kubeletDefaultEvictionHard = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,imagefs.inodesFree<5%"

// nodeAllocatable is what the kubelet reports as allocatable for its flags: capacity minus
// --kube-reserved, --system-reserved and the hard eviction thresholds of memory.available
// and nodefs.available, never below zero (k8s.io/kubernetes pkg/kubelet/cm
// GetNodeAllocatableReservation, getNodeAllocatableAbsoluteImpl). It fails where the kubelet
// would refuse to start.
func nodeAllocatable(capacity corev1.ResourceList, reg bootstrap.NodeRegistration) (corev1.ResourceList, error) {
	reserved := corev1.ResourceList{}
	for _, flag := range []string{"kube-reserved", "system-reserved"} {
		v, ok := reg.Arg(flag)
		if !ok || v == "" {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			name, value, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				return nil, fmt.Errorf("kubelet: invalid --%s %q", flag, v)
			}
			switch corev1.ResourceName(name) {
			case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, "pid":
			default:
				return nil, fmt.Errorf("kubelet: --%s: cannot reserve %q resource", flag, name)
			}
			q, err := resource.ParseQuantity(value)
			if err != nil || q.Sign() < 0 {
				return nil, fmt.Errorf("kubelet: --%s: invalid quantity %q for %s", flag, value, name)
			}
			add(reserved, corev1.ResourceName(name), q)
		}
	}
	hard, ok := reg.Arg("eviction-hard")
	if !ok {
		hard = kubeletDefaultEvictionHard
	}
	if hard != "" {
		for _, stmt := range strings.Split(hard, ",") {
			signal, value, ok := strings.Cut(strings.TrimSpace(stmt), "<")
			if !ok {
				return nil, fmt.Errorf("kubelet: --eviction-hard: invalid statement %q", stmt)
			}
			res, counts := map[string]corev1.ResourceName{"memory.available": corev1.ResourceMemory, "nodefs.available": corev1.ResourceEphemeralStorage}[signal]
			q, err := evictionQuantity(value, capacity[res], counts)
			if err != nil {
				return nil, fmt.Errorf("kubelet: --eviction-hard %s: %w", signal, err)
			}
			if counts && q != nil {
				add(reserved, res, *q)
			}
		}
	}
	out := corev1.ResourceList{}
	for name, c := range capacity {
		v := c.DeepCopy()
		if r, ok := reserved[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		out[name] = v
	}
	return out, nil
}

// evictionQuantity is a threshold's size: a quantity, or a percentage of capacity computed
// the kubelet's way (a float32 share, truncated). 0% and 100% are ignored.
func evictionQuantity(value string, capacity resource.Quantity, needed bool) (*resource.Quantity, error) {
	if pct, ok := strings.CutSuffix(value, "%"); ok {
		if value == "0%" || value == "100%" {
			return nil, nil
		}
		f, err := strconv.ParseFloat(pct, 32)
		if err != nil || f < 0 || f > 100 {
			return nil, fmt.Errorf("invalid percentage %q", value)
		}
		if !needed {
			return nil, nil
		}
		share := float32(f) / 100
		return resource.NewQuantity(int64(float64(capacity.Value())*float64(share)), resource.BinarySI), nil
	}
	q, err := resource.ParseQuantity(value)
	if err != nil || q.Sign() <= 0 {
		return nil, fmt.Errorf("threshold %q must be a positive quantity or a percentage", value)
	}
	return &q, nil
}

func add(list corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	sum := list[name]
	sum.Add(q)
	list[name] = sum
}
