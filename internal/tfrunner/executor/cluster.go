// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// RunnerPlacement is what a runner pod asks of a node: its requests, and where it may run
// (never on a node Karpenter manages: runnerAffinity).
type RunnerPlacement struct {
	Requests     corev1.ResourceList
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Namespace is where runner pods run.
	Namespace string
}

// RunnerCapacity is how many runner pods the cluster holds: Slots on Nodes nodes.
type RunnerCapacity struct {
	Slots, Nodes int
}

// RunnerSlots counts how many runner pods fit on the nodes they may run on: Ready,
// schedulable nodes that Karpenter does not manage, that match the runners' node selector and
// whose NoSchedule and NoExecute taints they tolerate. On each, it divides what the node's
// allocatable leaves after the requests of the pods on it that are not runners by a runner's
// requests (and counts the pods it may hold), so the slots include those runners in progress
// take.
func RunnerSlots(nodes []*corev1.Node, pods []*corev1.Pod, p RunnerPlacement) RunnerCapacity {
	used := map[string]corev1.ResourceList{}
	count := map[string]int64{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || isRunner(pod, p.Namespace) {
			continue
		}
		count[pod.Spec.NodeName]++
		sum := used[pod.Spec.NodeName]
		if sum == nil {
			sum = corev1.ResourceList{}
			used[pod.Spec.NodeName] = sum
		}
		for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
	}
	var c RunnerCapacity
	for _, node := range nodes {
		if !mayRunRunners(node, p) {
			continue
		}
		c.Nodes++
		fit := int64(math.MaxInt32)
		if pods, ok := node.Status.Allocatable[corev1.ResourcePods]; ok {
			fit = max(0, pods.Value()-count[node.Name])
		}
		for name, want := range p.Requests {
			if want.IsZero() {
				continue
			}
			have, ok := node.Status.Allocatable[name]
			if !ok {
				fit = 0
				break
			}
			if u, ok := used[node.Name][name]; ok {
				have.Sub(u)
			}
			fit = min(fit, max(0, have.MilliValue()/want.MilliValue()))
		}
		c.Slots += int(fit)
	}
	return c
}

// isRunner tells a runner pod: it is managed by the fulfiller, in the runners' namespace, and
// made by a Job.
func isRunner(pod *corev1.Pod, namespace string) bool {
	return pod.Namespace == namespace && pod.Labels[keys.LabelManagedBy] == keys.ManagedBy && pod.Labels[jobNameLabel] != ""
}

// mayRunRunners: the node is Ready and schedulable, not Karpenter's, matches the runners'
// node selector, and they tolerate its taints that keep pods off.
func mayRunRunners(node *corev1.Node, p RunnerPlacement) bool {
	if node.Spec.Unschedulable || node.DeletionTimestamp != nil {
		return false
	}
	if _, managed := node.Labels["karpenter.sh/nodepool"]; managed {
		return false
	}
	if !labels.SelectorFromSet(p.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false
	}
	for i := range node.Spec.Taints {
		taint := &node.Spec.Taints[i]
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for j := range p.Tolerations {
			if p.Tolerations[j].ToleratesTaint(klog.Background(), taint, true) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return false
		}
	}
	return true
}

// ClusterRunners bounds the runs of a Job executor by the cluster's capacity for runner
// pods (RunnerSlots), counted anew at every admission, so it follows the nodes as they come,
// go and fill.
type ClusterRunners struct {
	Placement RunnerPlacement
	// Observe lists the cluster's nodes and pods. It is called at every admission: it should
	// read an informer's cache.
	Observe func(ctx context.Context) ([]*corev1.Node, []*corev1.Pod, error)
}

// Admit implements Budget.
func (c *ClusterRunners) Admit(ctx context.Context, _ tfrunner.Request, load Load) error {
	nodes, pods, err := c.Observe(ctx)
	if err != nil {
		return fmt.Errorf("counting the cluster's runner capacity: %w", err)
	}
	capacity := RunnerSlots(nodes, pods, c.Placement)
	if load.Runs < capacity.Slots {
		return nil
	}
	return waitingForRunner(load.Runs, capacity.Slots, fmt.Sprintf("the cluster's capacity for runner pods of %s: %d nodes may run them",
		describeRequests(c.Placement.Requests), capacity.Nodes))
}

func describeRequests(r corev1.ResourceList) string {
	var parts []string
	if q, ok := r[corev1.ResourceCPU]; ok {
		parts = append(parts, q.String()+" CPU")
	}
	if q, ok := r[corev1.ResourceMemory]; ok {
		parts = append(parts, q.String()+" memory")
	}
	return strings.Join(parts, ", ")
}

// formatBytes shows a memory size in GiB, or MiB below one.
func formatBytes(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1fGi", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%dMi", n>>20)
}
