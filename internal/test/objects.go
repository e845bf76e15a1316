// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// Builders return a complete object with defaults a test can rely on; options change it.

// NodeType is a node type with 2 CPUs and 4Gi, one on-demand offering in zone a at 0.01, and a
// provider ID template "fake://{name}" (what the fake executor's apply reports).
func NodeType(name string, opts ...func(*v1alpha1.NodeType)) v1alpha1.NodeType {
	nt := v1alpha1.NodeType{
		Name: name,
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		},
		Offerings:          []v1alpha1.Offering{{Zone: "a", Price: "0.01"}},
		ProviderIDTemplate: "fake://{name}",
	}
	for _, o := range opts {
		o(&nt)
	}
	return nt
}

// NodeClass is a TofuNodeClass with module /modules/sim and the node type "small".
func NodeClass(name string, opts ...func(*v1alpha1.TofuNodeClass)) *v1alpha1.TofuNodeClass {
	nc := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: v1alpha1.TofuNodeClassSpec{
			Module:    v1alpha1.ModuleSource{Source: "/modules/sim", Version: "1"},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: "10.0.0.1:6443"},
			NodeTypes: []v1alpha1.NodeType{NodeType("small")},
		},
	}
	for _, o := range opts {
		o(nc)
	}
	return nc
}

// Ready makes a class's checks pass, as its status controller would have found them.
func Ready(nc *v1alpha1.TofuNodeClass) {
	conds := nc.StatusConditions()
	for _, c := range v1alpha1.ClassChecks() {
		conds.SetTrue(c)
	}
	conds.SetTrue(status.ConditionReady)
}

// NodeClaim is a claim of class for the node type "small", on-demand, made at created.
func NodeClaim(name, class string, created time.Time, opts ...func(*karpv1.NodeClaim)) *karpv1.NodeClaim {
	c := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{karpv1.NodePoolLabelKey: "default"},
		},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.Group, Kind: "TofuNodeClass", Name: class},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
				{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"small"}},
				{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
			},
			Resources: karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Node is a Ready Node with providerID, registered at created, without taints.
func Node(name, providerID string, created time.Time, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// ClusterCA is the kube-root-ca.crt ConfigMap of namespace, with a fresh CA certificate: the
// bootstrap stage hashes it into the join configuration.
func ClusterCA(namespace string) (*corev1.ConfigMap, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"}, NotBefore: time.Now(),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("making a CA certificate: %w", err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))},
	}, nil
}

// Secret is an Opaque Secret with data.
func Secret(namespace, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}
