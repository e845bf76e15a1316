// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package test

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
)

// Passphrase is a secret value that tests put in a class's Secrets; it must show nowhere.
const Passphrase = "correct horse battery staple"

// TwoTypeClass is a class "c" (UID "u", generation 1) of module /m with two node types:
// "small" (2 CPUs, 4Gi, offered in zone a at 0.01 and zone b at 0.009) and "large" (8 CPUs,
// 4Gi, zone a at 0.04), both with 100m CPU overhead. It has no status: the pure parts of the
// controllers take it as it is.
func TwoTypeClass() *v1alpha1.TofuNodeClass {
	nt := func(name, cpu string, offerings ...v1alpha1.Offering) v1alpha1.NodeType {
		return v1alpha1.NodeType{
			Name:      name,
			Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("4Gi")},
			Overhead:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Offerings: offerings,
		}
	}
	return &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u", Generation: 1},
		Spec: v1alpha1.TofuNodeClassSpec{
			Module:    v1alpha1.ModuleSource{Source: "/m", Version: "1"},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: "127.0.0.1:6443"},
			NodeTypes: []v1alpha1.NodeType{
				nt("small", "2", v1alpha1.Offering{Zone: "a", Price: "0.01"}, v1alpha1.Offering{Zone: "b", Price: "0.009"}),
				nt("large", "8", v1alpha1.Offering{Zone: "a", Price: "0.04"}),
			},
		},
	}
}

// GPUType is TwoTypeClass's "small" renamed "gpu", with 8 CPUs, 32Gi and one nvidia.com/gpu.
func GPUType() v1alpha1.NodeType {
	nt := TwoTypeClass().Spec.NodeTypes[0]
	nt.Name = "gpu"
	nt.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		"nvidia.com/gpu": resource.MustParse("1")}
	return nt
}

// Fulfillment is a Fulfillment as Create records one for the claim, made at created: node
// type small in zone a, on demand, provider ID fake://<claim>, module /modules/sim.
func Fulfillment(claim *karpv1.NodeClaim, created time.Time, opts ...func(*v1alpha1.Fulfillment)) *v1alpha1.Fulfillment {
	f := &v1alpha1.Fulfillment{
		ObjectMeta: metav1.ObjectMeta{Name: claim.Name, CreationTimestamp: metav1.NewTime(created), Finalizers: []string{classconfig.FinalizerDestroy}},
		Spec: v1alpha1.FulfillmentSpec{
			NodeClaimUID: string(claim.UID), NodeClass: claim.Spec.NodeClassRef.Name, NodePool: "default",
			NodeType: "small", Zone: "a", CapacityType: karpv1.CapacityTypeOnDemand, NodeName: claim.Name,
			ProviderID: "fake://" + claim.Name, StateKey: claim.Name, Module: "/modules/sim",
		},
	}
	for _, o := range opts {
		o(f)
	}
	return f
}

// GatedNode is a Ready node "claim" with the CNI and GPU readiness taints and a foreign
// taint, and one allocatable nvidia.com/gpu; mutate, when set, changes it.
func GatedNode(mutate func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Labels: map[string]string{}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: v1alpha1.TaintCNI, Effect: corev1.TaintEffectNoSchedule},
			{Key: v1alpha1.TaintGPU, Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/dedicated", Effect: corev1.TaintEffectNoSchedule},
		}},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		},
	}
	if mutate != nil {
		mutate(n)
	}
	return n
}
