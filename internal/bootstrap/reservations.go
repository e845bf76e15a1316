// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Reservations are what a node's kubelet keeps from pods. A kubelet reports allocatable =
// capacity - kube-reserved - system-reserved - the hard eviction thresholds of
// memory.available and nodefs.available (k8s.io/kubernetes pkg/kubelet/cm
// GetNodeAllocatableReservation); Karpenter computes the same from an instance type's
// overhead (cloudprovider.InstanceType.Allocatable). Rendering them into the
// JoinConfiguration's kubelet args makes the two agree.
type Reservations struct {
	KubeReserved   corev1.ResourceList
	SystemReserved corev1.ResourceList
	// EvictionHard maps eviction signals to thresholds (a quantity or a percentage); nil
	// means DefaultEvictionHard. It replaces the kubelet's defaults entirely, as its
	// --eviction-hard flag does.
	EvictionHard map[string]string
}

// DefaultEvictionHard is the kubelet's own default on Linux (k8s.io/kubernetes
// pkg/kubelet/eviction/defaults_linux.go).
var DefaultEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// reservable are the resources kube-reserved and system-reserved may name (the kubelet
// refuses others).
var reservable = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, "pid"}

// evictionSignals are the signals --eviction-hard accepts with "<" (pkg/kubelet/eviction/api).
var evictionSignals = []string{
	"memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available", "imagefs.inodesFree",
	"containerfs.available", "containerfs.inodesFree", "allocatableMemory.available", "pid.available",
}

// Kubelet args the fulfiller sets from Reservations.
const (
	ArgKubeReserved   = "kube-reserved"
	ArgSystemReserved = "system-reserved"
	ArgEvictionHard   = "eviction-hard"
)

func (r Reservations) evictionHard() map[string]string {
	if r.EvictionHard == nil {
		return DefaultEvictionHard
	}
	return r.EvictionHard
}

// Validate reports what a kubelet would refuse, one joined error per problem.
func (r Reservations) Validate() error {
	var errs []error
	for what, list := range map[string]corev1.ResourceList{ArgKubeReserved: r.KubeReserved, ArgSystemReserved: r.SystemReserved} {
		for name, q := range list {
			if !slices.Contains(reservable, name) {
				errs = append(errs, fmt.Errorf("%s cannot reserve %s (only cpu, memory, ephemeral-storage and pid)", what, name))
			}
			if q.Sign() < 0 {
				errs = append(errs, fmt.Errorf("%s of %s is negative", what, name))
			}
		}
	}
	for _, signal := range slices.Sorted(maps.Keys(r.EvictionHard)) {
		if !slices.Contains(evictionSignals, signal) {
			errs = append(errs, fmt.Errorf("eviction signal %s is unknown", signal))
			continue
		}
		if _, _, err := parseThreshold(r.EvictionHard[signal]); err != nil {
			errs = append(errs, fmt.Errorf("eviction threshold %s: %w", signal, err))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// KubeletArgs renders the reservations as kubelet flags. eviction-hard is always set, so
// the kubelet's configuration file cannot change what Karpenter expects.
func (r Reservations) KubeletArgs() []Arg {
	var args []Arg
	if v := resourceListArg(r.KubeReserved); v != "" {
		args = append(args, Arg{Name: ArgKubeReserved, Value: v})
	}
	if v := resourceListArg(r.SystemReserved); v != "" {
		args = append(args, Arg{Name: ArgSystemReserved, Value: v})
	}
	hard := r.evictionHard()
	parts := make([]string, 0, len(hard))
	for _, signal := range slices.Sorted(maps.Keys(hard)) {
		parts = append(parts, signal+"<"+hard[signal])
	}
	return append(args, Arg{Name: ArgEvictionHard, Value: strings.Join(parts, ",")})
}

func resourceListArg(list corev1.ResourceList) string {
	parts := make([]string, 0, len(list))
	for _, name := range slices.Sorted(maps.Keys(list)) {
		q := list[name]
		parts = append(parts, string(name)+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// EvictionThreshold is what the hard eviction thresholds take from a node of this capacity,
// computed as the kubelet does (pkg/kubelet/eviction/api GetThresholdQuantity): memory from
// memory.available, ephemeral-storage from nodefs.available; a percentage is of the
// capacity, parsed as a float32. A threshold of 0% or 100% is ignored, as the kubelet
// ignores it.
func (r Reservations) EvictionThreshold(capacity corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for signal, res := range map[string]corev1.ResourceName{"memory.available": corev1.ResourceMemory, "nodefs.available": corev1.ResourceEphemeralStorage} {
		v, ok := r.evictionHard()[signal]
		if !ok {
			continue
		}
		q, pct, err := parseThreshold(v)
		switch {
		case err != nil:
			continue
		case q != nil:
			out[res] = q.DeepCopy()
		case pct > 0:
			c, ok := capacity[res]
			if !ok {
				continue
			}
			out[res] = *resource.NewQuantity(int64(float64(c.Value())*float64(pct)), resource.BinarySI)
		}
	}
	return out
}

// parseThreshold reads a threshold as the kubelet does (pkg/kubelet/eviction
// parseThresholdStatement): a percentage (0% and 100% mean none), or a positive quantity.
func parseThreshold(v string) (*resource.Quantity, float32, error) {
	if num, ok := strings.CutSuffix(v, "%"); ok {
		if v == "0%" || v == "100%" {
			return nil, 0, nil
		}
		f, err := strconv.ParseFloat(num, 32)
		if err != nil || f < 0 || f > 100 {
			return nil, 0, fmt.Errorf("%q is not a percentage between 0%% and 100%%", v)
		}
		return nil, float32(f) / 100, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return nil, 0, fmt.Errorf("%q is not a positive quantity or a percentage", v)
	}
	return &q, 0, nil
}
