// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/nodecheck"
)

func yamlOf(v any) ([]byte, error) { return yaml.Marshal(v) }

// caHash is a well-formed discovery pin (kubeadm checks the pin's form when it reads it).
const caHash = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// extraCloudConfig is what a NodeClass's bootstrap.extraCloudConfig may hold.
const extraCloudConfig = `#cloud-config
packages: [jq]
write_files:
- path: /etc/motd
  content: managed by the fulfiller
runcmd:
- [sysctl, --system]
- echo prepared
`

func tools(t *testing.T) *nodecheck.Tools {
	t.Helper()
	tl, err := nodecheck.Find()
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// familySpecs are the join specs each node-type family renders (internal/claims'
// bootstrap stage): the simulated type and KubeVirt with a provider ID known before the
// apply, Hetzner Robot with the leased server's, Hetzner Cloud reading it from the metadata
// service at boot, within its 32 KiB.
func familySpecs(t *testing.T) map[string]bootstrap.JoinSpec {
	t.Helper()
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	base := bootstrap.JoinSpec{
		APIServerEndpoint: "10.0.0.2:6443",
		Token:             tok,
		CACertHash:        caHash,
		NodeName:          "pool-a-x7k2q",
		Labels:            map[string]string{"node.kubernetes.io/instance-type": "cx22", "topology.kubernetes.io/zone": "fsn1"},
		Taints: []corev1.Taint{
			{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute},
			{Key: "readiness.k8s.io/cni", Effect: corev1.TaintEffectNoSchedule},
		},
		Reservations: bootstrap.Reservations{
			KubeReserved:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			SystemReserved: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		KubeletExtraArgs: []bootstrap.Arg{{Name: "max-pods", Value: "60"}},
	}
	base.Report = &bootstrap.Report{
		URL:   bootstrap.ReportURL(base.APIServerEndpoint, "fulfiller.sh", "v1alpha1", "fulfiller", base.NodeName),
		CAPEM: []byte("-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIBATAKBggqhkjOPQQDAjAbMRkwFwYDVQQDExBmdWxmaWxs\n-----END CERTIFICATE-----\n"),
	}
	sim, kubevirt, robot, hcloud := base, base, base, base
	sim.ProviderID = "sim://pool-a-x7k2q"
	kubevirt.ProviderID = "kubevirt://pool-a-x7k2q"
	robot.ProviderID = "hrobot://321"
	hcloud.ProviderIDFrom = &bootstrap.ProviderIDSource{URL: "http://169.254.169.254/hetzner/v1/metadata/instance-id", Prefix: "hcloud://"}
	hcloud.UserDataLimit = 32 << 10
	return map[string]bootstrap.JoinSpec{"sim": sim, "kubevirt": kubevirt, "robot": robot, "hcloud": hcloud}
}

// installModes are the class's bootstrap.install: packages on a stock image, none on an image
// that has the node software.
var installModes = map[string]bootstrap.Install{
	"packages": {Packages: true, KubernetesVersion: "v1.36.3"},
	"none":     {},
}

// TestUserDataReadByRealTools: every user data the fulfiller renders — each family, each
// install mode, with and without an extra cloud-config, as it is and gzipped — is valid to
// the real cloud-init (`cloud-init schema`, after the real base64 and gzip), its
// JoinConfiguration to the real kubeadm of the class's version (`kubeadm config validate`)
// and its scripts to shellcheck.
func TestUserDataReadByRealTools(t *testing.T) {
	tl := tools(t)
	for family, spec := range familySpecs(t) {
		for mode, install := range installModes {
			for _, extra := range []string{"", extraCloudConfig} {
				for _, packed := range []bool{false, true} {
					name := fmt.Sprintf("%s/%s/extra=%t/gzip=%t", family, mode, extra != "", packed)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						spec := spec
						spec.Install, spec.ExtraCloudConfig = install, extra
						data := render(t, spec, packed)
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						if err := tl.Check(ctx, install.KubernetesVersion, data); err != nil {
							t.Fatalf("the real tools refuse the user data:\n%v", err)
						}
					})
				}
			}
		}
	}
}

// TestUserDataSize: with the node software installed at boot, a Hetzner Cloud user data
// with an extra cloud-config stays well within Hetzner's 32 KiB as it is, and gzipped it is
// a fraction of that.
func TestUserDataSize(t *testing.T) {
	spec := familySpecs(t)["hcloud"]
	spec.Install, spec.ExtraCloudConfig = installModes["packages"], extraCloudConfig
	spec.UserDataLimit = 0
	raw, err := bootstrap.RenderUserData(spec)
	if err != nil {
		t.Fatal(err)
	}
	packed := render(t, spec, true)
	t.Logf("Hetzner Cloud user data, install packages, with an extra cloud-config: %d bytes, %d gzipped and base64-encoded", len(raw), len(packed))
	if len(raw) > 24<<10 {
		t.Errorf("%d bytes leave less than 8 KiB of Hetzner's 32 KiB for the class's own cloud-config", len(raw))
	}
	if len(packed) > 12<<10 {
		t.Errorf("gzipped it is still %d bytes", len(packed))
	}
}

// render renders spec; packed, with a limit just under its size, so that it is gzipped and
// base64-encoded as for a cloud whose limit it is over.
func render(t *testing.T, spec bootstrap.JoinSpec, packed bool) []byte {
	t.Helper()
	spec.UserDataLimit = 0
	data, err := bootstrap.RenderUserData(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !packed {
		return data
	}
	spec.UserDataLimit = int64(len(data)) - 1
	if data, err = bootstrap.RenderUserData(spec); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "H4sI") {
		t.Fatalf("user data over its limit is not gzipped and base64-encoded: %.20q", data)
	}
	return data
}

// TestRealToolsRefuse shows that each check bites: an extra cloud-config the fulfiller's merge
// accepts but cloud-init's schema does not, a JoinConfiguration kubeadm rejects (a node name
// that is no RFC 1123 subdomain; kubelet args in v1beta3's map form) and a script shellcheck
// rejects.
func TestRealToolsRefuse(t *testing.T) {
	tl := tools(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := familySpecs(t)["sim"]

	for name, extra := range map[string]string{
		"write_files entry without a path": "#cloud-config\nwrite_files:\n- content: hello\n",
		"runcmd entry that is a map":       "#cloud-config\nruncmd:\n- {sysctl: --system}\n",
	} {
		t.Run(name, func(t *testing.T) {
			s := spec
			s.ExtraCloudConfig = extra
			data, err := bootstrap.RenderUserData(s)
			if err != nil {
				t.Fatalf("the fulfiller's merge refused it already: %v", err)
			}
			err = tl.CloudInitSchema(ctx, data)
			if err == nil || !strings.Contains(err.Error(), "Cloud config schema errors") {
				t.Fatalf("cloud-init schema accepted %q: %v", extra, err)
			}
			for _, packed := range []bool{true} {
				if err := tl.CloudInitSchema(ctx, render(t, s, packed)); err == nil {
					t.Fatalf("cloud-init schema accepted the gzipped %q", extra)
				}
			}
		})
	}

	upper := spec
	upper.NodeName = "Pool_A"
	join, err := yamlOf(upper.JoinConfiguration())
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.KubeadmValidate(ctx, "", join); err == nil || !strings.Contains(err.Error(), "nodeRegistration.name") {
		t.Errorf("kubeadm accepted node name %q: %v", upper.NodeName, err)
	}
	good, err := yamlOf(spec.JoinConfiguration())
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.KubeadmValidate(ctx, "", good); err != nil {
		t.Fatalf("kubeadm refused the rendered JoinConfiguration: %v", err)
	}
	doc := map[string]any{}
	if err := yaml.Unmarshal(good, &doc); err != nil {
		t.Fatal(err)
	}
	doc["nodeRegistration"].(map[string]any)["kubeletExtraArgs"] = map[string]string{"provider-id": spec.ProviderID}
	mapForm, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.KubeadmValidate(ctx, "", mapForm); err == nil || !strings.Contains(err.Error(), "kubeletExtraArgs") {
		t.Errorf("kubeadm accepted kubelet args in map form: %v\n%s", err, mapForm)
	}
	if _, err := tl.KubeadmFor(ctx, "v1.20.0"); err == nil || !strings.Contains(err.Error(), "K8S_VERSION=1.20.0") {
		t.Errorf("a kubeadm of another minor was used for v1.20.0: %v", err)
	}

	if err := tl.Shellcheck(ctx, "unquoted.sh", []byte("#!/bin/sh\nrm -rf $1/*\n")); err == nil || !strings.Contains(err.Error(), "SC2086") {
		t.Errorf("shellcheck accepted an unquoted expansion: %v", err)
	}
}
