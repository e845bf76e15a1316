// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestUserDataRoundTrip(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	spec := JoinSpec{
		APIServerEndpoint: "127.0.0.1:6443",
		Token:             tok,
		CACertHash:        "sha256:abcd",
		NodeName:          "node-a",
		ProviderID:        "sim://node-a",
		Labels:            map[string]string{"node.kubernetes.io/instance-type": "small", "b": "2"},
		Taints:            []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}},
	}
	data, err := RenderUserData(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "#cloud-config\n") {
		t.Fatalf("user data does not start with #cloud-config: %q", data[:20])
	}
	jc, err := ParseUserData(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := jc.Discovery.BootstrapToken.Token; got != tok.String() {
		t.Errorf("token = %q", got)
	}
	if id, _ := jc.NodeRegistration.Arg("provider-id"); id != "sim://node-a" {
		t.Errorf("provider-id = %q", id)
	}
	labels, _ := jc.NodeRegistration.Arg("node-labels")
	if labels != "b=2,node.kubernetes.io/instance-type=small" {
		t.Errorf("node-labels = %q", labels)
	}
	if got := ParseNodeLabels(labels); got["b"] != "2" || len(got) != 2 {
		t.Errorf("ParseNodeLabels = %v", got)
	}
	if len(jc.NodeRegistration.Taints) != 1 || jc.NodeRegistration.Taints[0].Key != "karpenter.sh/unregistered" {
		t.Errorf("taints = %v", jc.NodeRegistration.Taints)
	}
	if jc.NodeRegistration.Name != "node-a" {
		t.Errorf("name = %q", jc.NodeRegistration.Name)
	}
}

func TestParseUserDataRejects(t *testing.T) {
	for name, data := range map[string]string{
		"not cloud-config": "#!/bin/sh\necho hi\n",
		"no join file":     "#cloud-config\nwrite_files: []\n",
		"wrong kind":       "#cloud-config\nwrite_files:\n- path: " + JoinConfigPath + "\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta3\n    kind: JoinConfiguration\n",
	} {
		if _, err := ParseUserData([]byte(data)); err == nil {
			t.Errorf("%s: ParseUserData accepted %q", name, data)
		}
	}
}

func TestTokenParse(t *testing.T) {
	if _, err := ParseToken("abcdef.0123456789abcdef"); err != nil {
		t.Errorf("valid token refused: %v", err)
	}
	for _, bad := range []string{"", "abcdef", "ABCDEF.0123456789abcdef", "abcdef.0123"} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
}
