// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

func hcloudSpec(t *testing.T) JoinSpec {
	t.Helper()
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return JoinSpec{
		APIServerEndpoint: "10.0.0.2:6443", Token: tok, CACertHash: "sha256:abcd", NodeName: "node-a",
		ProviderIDFrom: &ProviderIDSource{URL: v1alpha1.DefaultMetadataURL, Prefix: v1alpha1.DefaultProviderIDPrefix},
		Taints:         []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}},
	}
}

// TestProviderIDFromMetadata: the JoinConfiguration holds a placeholder, which the boot
// script replaces with the instance ID it reads from the metadata URL its settings name
// (TestBootScript runs it); a source that cannot be written into them safely is refused.
func TestProviderIDFromMetadata(t *testing.T) {
	spec := hcloudSpec(t)
	spec.ProviderID = "ignored://x"
	data, err := RenderUserData(spec)
	if err != nil {
		t.Fatal(err)
	}
	jc, err := ParseUserData(data)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := jc.NodeRegistration.Arg("provider-id"); id != "hcloud://"+InstanceIDPlaceholder {
		t.Errorf("provider-id = %q", id)
	}
	env := fileContent(t, data, BootEnvPath)
	for _, want := range []string{"FULFILLER_INSTANCE_ID_URL='" + v1alpha1.DefaultMetadataURL + "'"} {
		if !strings.Contains(env, want) {
			t.Errorf("boot settings lack %s:\n%s", want, env)
		}
	}
	if !strings.Contains(string(BootScript), InstanceIDPlaceholder) {
		t.Errorf("boot.sh does not replace %s", InstanceIDPlaceholder)
	}
	for _, bad := range []ProviderIDSource{
		{URL: "file:///etc/id", Prefix: "hcloud://"},
		{URL: "http://169.254.169.254/x'; rm -rf /'", Prefix: "hcloud://"},
		{URL: v1alpha1.DefaultMetadataURL, Prefix: ""},
		{URL: v1alpha1.DefaultMetadataURL, Prefix: "a|b"},
	} {
		spec.ProviderIDFrom = &bad
		if _, err := RenderUserData(spec); err == nil {
			t.Errorf("rendered with %+v", bad)
		}
	}
}

// fileContent is the content of the file the user data writes at path.
func fileContent(t *testing.T, data []byte, path string) string {
	t.Helper()
	for _, f := range mustCloudConfig(t, data).WriteFiles {
		if f.Path == path {
			return f.Content
		}
	}
	t.Fatalf("the user data writes no %s", path)
	return ""
}

func mustCloudConfig(t *testing.T, data []byte) cloudConfig {
	t.Helper()
	var cc cloudConfig
	if err := yaml.Unmarshal(data, &cc); err != nil {
		t.Fatal(err)
	}
	return cc
}

func TestReservations(t *testing.T) {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("40Gi"),
	}
	r := Reservations{
		KubeReserved:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		SystemReserved: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	args := r.KubeletArgs()
	want := []Arg{
		{Name: ArgKubeReserved, Value: "cpu=100m,memory=256Mi"},
		{Name: ArgSystemReserved, Value: "memory=128Mi"},
		{Name: ArgEvictionHard, Value: "imagefs.available<15%,imagefs.inodesFree<5%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%"},
	}
	if len(args) != len(want) {
		t.Fatalf("args = %v", args)
	}
	for i := range want {
		if args[i] != want[i] {
			t.Errorf("arg %d = %v, want %v", i, args[i], want[i])
		}
	}
	// 10% of 40Gi the kubelet's way: float32(10)/100 times the capacity, truncated.
	th := r.EvictionThreshold(capacity)
	if m, s := th[corev1.ResourceMemory], th[corev1.ResourceEphemeralStorage]; m.String() != "100Mi" || s.Value() != int64(float64(40<<30)*float64(float32(10)/100)) {
		t.Errorf("eviction threshold = %v", th)
	}
	if _, ok := (Reservations{EvictionHard: map[string]string{"memory.available": "0%"}}).EvictionThreshold(capacity)[corev1.ResourceMemory]; ok {
		t.Error("a 0% threshold reserves memory")
	}
	if len((Reservations{EvictionHard: map[string]string{}}).EvictionThreshold(capacity)) != 0 {
		t.Error("an empty eviction-hard reserves something")
	}

	bad := Reservations{
		KubeReserved: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		EvictionHard: map[string]string{"memory.available": "-1Mi", "disk.free": "1Gi", "nodefs.available": "120%"},
	}
	err := bad.Validate()
	for _, want := range []string{"cannot reserve nvidia.com/gpu", "memory.available", "disk.free is unknown", "nodefs.available"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
	}
	if err := r.Validate(); err != nil {
		t.Errorf("valid reservations: %v", err)
	}
}
