// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package executor

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

func node(name string, cpu, memory string, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func pod(namespace, name, nodeName, cpu, memory string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: lbls},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestRunnerSlots: runner pods fit on the nodes they may run on, in what other pods leave.
func TestRunnerSlots(t *testing.T) {
	runner := RunnerPlacement{Namespace: "fulfiller", Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}
	runnerLabels := map[string]string{keys.LabelManagedBy: keys.ManagedBy, jobNameLabel: "sim-a-apply-1"}
	tainted := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	}
	for _, c := range []struct {
		name      string
		nodes     []*corev1.Node
		pods      []*corev1.Pod
		placement func(*RunnerPlacement)
		want      RunnerCapacity
	}{
		{"memory is scarcer than CPU", []*corev1.Node{node("a", "4", "2Gi")}, nil, nil, RunnerCapacity{Slots: 8, Nodes: 1}},
		{"CPU is scarcer than memory", []*corev1.Node{node("a", "1", "16Gi")}, nil, nil, RunnerCapacity{Slots: 10, Nodes: 1}},
		{"other pods' requests are taken off, runners' are not", []*corev1.Node{node("a", "2", "4Gi"), node("b", "2", "4Gi")}, []*corev1.Pod{
			pod("kube-system", "dns", "a", "500m", "1Gi", nil),
			pod("fulfiller", "sim-a-apply-1-x", "a", "100m", "256Mi", runnerLabels),
			pod("other", "lookalike", "b", "1", "0", runnerLabels), // not in the runners' namespace
			pod("kube-system", "pending", "", "2", "4Gi", nil),
			func() *corev1.Pod {
				p := pod("default", "done", "b", "2", "4Gi", nil)
				p.Status.Phase = corev1.PodSucceeded
				return p
			}(),
		}, nil, RunnerCapacity{Slots: 12 + 10, Nodes: 2}},
		{"a full node holds none", []*corev1.Node{node("a", "1", "4Gi")}, []*corev1.Pod{pod("default", "big", "a", "1", "0", nil)}, nil, RunnerCapacity{Slots: 0, Nodes: 1}},
		{"pods allocatable bounds", []*corev1.Node{node("a", "8", "16Gi", func(n *corev1.Node) { n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("3") })},
			[]*corev1.Pod{pod("default", "p", "a", "0", "0", nil)}, nil, RunnerCapacity{Slots: 2, Nodes: 1}},
		{"Karpenter's, unready, cordoned and deleted nodes run none", []*corev1.Node{
			node("karpenter", "8", "16Gi", func(n *corev1.Node) { n.Labels["karpenter.sh/nodepool"] = "general" }),
			node("unready", "8", "16Gi", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }),
			node("cordoned", "8", "16Gi", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
			node("deleted", "8", "16Gi", func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{} }),
		}, nil, nil, RunnerCapacity{}},
		{"taints keep runners off unless tolerated", []*corev1.Node{node("cp", "2", "8Gi", tainted), node("soft", "1", "8Gi", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}}
		})}, nil, nil, RunnerCapacity{Slots: 10, Nodes: 1}},
		{"tolerated taint", []*corev1.Node{node("cp", "2", "8Gi", tainted)}, nil, func(p *RunnerPlacement) {
			p.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}}
		}, RunnerCapacity{Slots: 20, Nodes: 1}},
		{"the node selector picks nodes", []*corev1.Node{node("a", "1", "8Gi"), node("b", "1", "8Gi")}, nil, func(p *RunnerPlacement) {
			p.NodeSelector = map[string]string{"kubernetes.io/hostname": "b"}
		}, RunnerCapacity{Slots: 10, Nodes: 1}},
		{"a resource the node lacks", []*corev1.Node{node("a", "8", "16Gi")}, nil, func(p *RunnerPlacement) {
			p.Requests = corev1.ResourceList{"example.com/runner": resource.MustParse("1")}
		}, RunnerCapacity{Slots: 0, Nodes: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := runner
			if c.placement != nil {
				c.placement(&p)
			}
			if got := RunnerSlots(c.nodes, c.pods, p); got != c.want {
				t.Errorf("capacity %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestClusterRunnersFollowTheNodes: the bound is counted at each admission, so a node that
// joins adds slots; a refusal has the numbers.
func TestClusterRunnersFollowTheNodes(t *testing.T) {
	nodes := []*corev1.Node{node("a", "200m", "4Gi")}
	c := &ClusterRunners{
		Placement: (&Job{Namespace: "fulfiller"}).Placement(),
		Observe:   func(context.Context) ([]*corev1.Node, []*corev1.Pod, error) { return nodes, nil, nil },
	}
	ctx := context.Background()
	if err := c.Admit(ctx, tfrunner.Request{}, Load{Runs: 1}); err != nil {
		t.Fatalf("second of two slots: %v", err)
	}
	err := c.Admit(ctx, tfrunner.Request{}, Load{Runs: 2})
	var refused *AdmissionError
	if !errors.As(err, &refused) || refused.Reason != v1alpha1.ReasonWaitingForRunner ||
		refused.Message != "2 of 2 tofu runs in progress (the cluster's capacity for runner pods of 100m CPU, 256Mi memory: 1 nodes may run them): waiting for a runner" {
		t.Fatalf("full: %v", err)
	}
	nodes = append(nodes, node("b", "1", "4Gi"))
	if err := c.Admit(ctx, tfrunner.Request{}, Load{Runs: 2}); err != nil {
		t.Errorf("after a node joined: %v", err)
	}
	c.Observe = func(context.Context) ([]*corev1.Node, []*corev1.Pod, error) {
		return nil, nil, errors.New("cache not synced")
	}
	if err := c.Admit(ctx, tfrunner.Request{}, Load{}); err == nil || errors.Is(err, ErrBusy) {
		t.Errorf("unobservable cluster: %v", err)
	}
}
