// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"os"
	"os/exec"
	"path/filepath"
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

// runcmd returns the user data's runcmd entries.
func runcmd(t *testing.T, data []byte) []any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc["runcmd"].([]any)
}

// TestProviderIDFromMetadata: the JoinConfiguration holds a placeholder, and the runcmd
// reads the instance ID from the metadata URL into it before `kubeadm join`, in one script.
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
	cmds := runcmd(t, data)
	if len(cmds) != 2 {
		t.Fatalf("runcmd = %v", cmds)
	}
	sh := cmds[0].([]any)
	if len(sh) != 3 || sh[0] != "sh" || sh[1] != "-c" {
		t.Fatalf("first runcmd = %v", sh)
	}
	script := sh[2].(string)
	for _, want := range []string{"set -eu", "curl -fsS", "'" + v1alpha1.DefaultMetadataURL + "'", "sed -i", "kubeadm join --config " + JoinConfigPath} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	if strings.Index(script, "sed -i") > strings.Index(script, "kubeadm join") {
		t.Error("the script joins before it writes the instance ID")
	}
	if rm := cmds[1].([]any); rm[0] != "rm" {
		t.Errorf("second runcmd = %v", rm)
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

// TestProviderIDScriptOnAShell runs the script with /bin/sh and the system's sed, with curl
// and kubeadm stand-ins on PATH: a good ID ends up in the JoinConfiguration kubeadm reads, a
// failed or unusable answer stops before kubeadm runs.
func TestProviderIDScriptOnAShell(t *testing.T) {
	spec := hcloudSpec(t)
	data, err := RenderUserData(spec)
	if err != nil {
		t.Fatal(err)
	}
	script := runcmd(t, data)[0].([]any)[2].(string)
	var joinContent string
	for _, f := range mustCloudConfig(t, data).WriteFiles {
		if f.Path == JoinConfigPath {
			joinContent = f.Content
		}
	}
	for _, tc := range []struct {
		name, curl string
		wantJoin   bool
		wantID     string
	}{
		{name: "instance id", curl: "echo 4711", wantJoin: true, wantID: "hcloud://4711"},
		{name: "not found", curl: "echo 'curl: (22) The requested URL returned error: 404' >&2; exit 22"},
		{name: "unusable answer", curl: "echo '4711&x'"},
		{name: "empty answer", curl: "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin, conf, joined := filepath.Join(dir, "bin"), filepath.Join(dir, "join.yaml"), filepath.Join(dir, "joined.yaml")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			write := func(path, content string, mode os.FileMode) {
				if err := os.WriteFile(path, []byte(content), mode); err != nil {
					t.Fatal(err)
				}
			}
			write(conf, joinContent, 0o600)
			write(filepath.Join(bin, "curl"), "#!/bin/sh\n"+tc.curl+"\n", 0o755)
			write(filepath.Join(bin, "kubeadm"), "#!/bin/sh\ncp \"$3\" "+joined+"\n", 0o755)
			cmd := exec.Command("/bin/sh", "-c", strings.ReplaceAll(script, JoinConfigPath, conf))
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			got, readErr := os.ReadFile(joined)
			if !tc.wantJoin {
				if err == nil || readErr == nil {
					t.Fatalf("the script went on to kubeadm join (err %v):\n%s", err, out)
				}
				return
			}
			if err != nil || readErr != nil {
				t.Fatalf("script: %v, %v\n%s", err, readErr, out)
			}
			var jc JoinConfiguration
			if err := yaml.UnmarshalStrict(got, &jc); err != nil {
				t.Fatal(err)
			}
			if id, _ := jc.NodeRegistration.Arg("provider-id"); id != tc.wantID {
				t.Errorf("kubeadm joined with provider-id %q, want %q", id, tc.wantID)
			}
		})
	}
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
