// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package controlplane_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/nodecheck"
)

// claimJoin renders a claim's user data against this control plane, with a token minted as
// the controller mints a claim's, and returns the JoinConfiguration its cloud-init writes.
func claimJoin(ctx context.Context, t *testing.T, spec bootstrap.JoinSpec) (bootstrap.Token, []byte) {
	t.Helper()
	u, err := url.Parse(controlPlane.Server)
	if err != nil {
		t.Fatal(err)
	}
	spec.APIServerEndpoint = u.Host
	spec.Token = mintToken(ctx, t, time.Now().Add(10*time.Minute))
	if spec.CACertHash == "" {
		if spec.CACertHash, err = bootstrap.CACertHash(controlPlane.CAPEM); err != nil {
			t.Fatal(err)
		}
	}
	data, err := bootstrap.RenderUserData(spec)
	if err != nil {
		t.Fatal(err)
	}
	files, err := nodecheck.WriteFiles(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Path == bootstrap.JoinConfigPath {
			return spec.Token, []byte(f.Content)
		}
	}
	t.Fatalf("the user data writes no %s", bootstrap.JoinConfigPath)
	return bootstrap.Token{}, nil
}

// withDiscoveryTimeout sets the JoinConfiguration's timeouts.discovery: kubeadm waits that
// long (5 minutes by default) for a token's signature in cluster-info before it gives up.
func withDiscoveryTimeout(t *testing.T, join []byte, d time.Duration) []byte {
	t.Helper()
	doc := map[string]any{}
	if err := yaml.Unmarshal(join, &doc); err != nil {
		t.Fatal(err)
	}
	doc["timeouts"] = map[string]any{"discovery": d.String()}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKubeadmJoinKubeletStart runs the real `kubeadm join phase kubelet-start` with a claim's
// rendered JoinConfiguration, live token and CA pin against this control plane, in a private
// mount namespace: token discovery, the CA-pin check and kubeadm's ConfigMaps read with the
// token all pass, and the kubelet's flags it writes carry the claim's provider ID, labels,
// taints and reservations. A revoked token and a wrong pin are refused.
func TestKubeadmJoinKubeletStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tl, err := nodecheck.Find()
	if err != nil {
		t.Fatal(err)
	}
	spec := bootstrap.JoinSpec{
		NodeName:   "pool-a-x7k2q",
		ProviderID: "hcloud://4711",
		CRISocket:  "unix:///run/containerd/containerd.sock",
		Labels:     map[string]string{"node.kubernetes.io/instance-type": "cx22", "topology.kubernetes.io/zone": "fsn1"},
		Taints: []corev1.Taint{
			{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute},
			{Key: "readiness.k8s.io/cni", Value: "pending", Effect: corev1.TaintEffectNoSchedule},
		},
		Reservations: bootstrap.Reservations{
			KubeReserved:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			SystemReserved: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			EvictionHard:   map[string]string{"memory.available": "200Mi", "nodefs.available": "5%"},
		},
	}
	tok, join := claimJoin(ctx, t, spec)
	joined, err := tl.KubeletStart(ctx, "", join)
	if err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{
		"provider-id":          "hcloud://4711",
		"node-labels":          "node.kubernetes.io/instance-type=cx22,topology.kubernetes.io/zone=fsn1",
		"register-with-taints": "karpenter.sh/unregistered:NoExecute,readiness.k8s.io/cni=pending:NoSchedule",
		"kube-reserved":        "cpu=100m,memory=256Mi",
		"system-reserved":      "memory=128Mi",
		"eviction-hard":        "memory.available<200Mi,nodefs.available<5%",
		"hostname-override":    "pool-a-x7k2q",
	} {
		if got, ok := joined.Flags[flag]; !ok || got != want {
			t.Errorf("kubelet flag --%s = %q (set %t), want %q", flag, got, ok, want)
		}
	}
	boot, err := clientcmd.Load(joined.BootstrapKubeconfig)
	if err != nil {
		t.Fatalf("bootstrap-kubelet.conf: %v", err)
	}
	for _, c := range boot.Clusters {
		if c.Server != controlPlane.Server || string(c.CertificateAuthorityData) != string(controlPlane.CAPEM) {
			t.Errorf("bootstrap-kubelet.conf reaches %s with another CA, want %s and the cluster CA", c.Server, controlPlane.Server)
		}
	}
	for _, a := range boot.AuthInfos {
		if a.Token != tok.String() {
			t.Error("bootstrap-kubelet.conf does not carry the claim's token")
		}
	}
	if string(joined.CA) != string(controlPlane.CAPEM) {
		t.Error("kubeadm wrote another CA than the cluster's to /etc/kubernetes/pki/ca.crt")
	}
	// The CRI socket is a flag, or with kubeadm's NodeLocalCRISocket the node's own config.
	var instance struct {
		ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
	}
	if err := yaml.Unmarshal(joined.InstanceConfig, &instance); err != nil {
		t.Fatalf("instance-config.yaml: %v", err)
	}
	if cri := "unix:///run/containerd/containerd.sock"; joined.Flags["container-runtime-endpoint"] != cri && instance.ContainerRuntimeEndpoint != cri {
		t.Errorf("the kubelet is not given the CRI socket %s: flags %v, instance config %q", cri, joined.Flags, joined.InstanceConfig)
	}
	if !strings.Contains(string(joined.KubeletConfig), "kind: KubeletConfiguration") {
		t.Errorf("config.yaml is no KubeletConfiguration:\n%s", joined.KubeletConfig)
	}

	t.Run("wrong pin", func(t *testing.T) {
		other := spec
		other.CACertHash = otherCAHash(t)
		_, join := claimJoin(ctx, t, other)
		_, err := tl.KubeletStart(ctx, "", join)
		if err == nil || !strings.Contains(err.Error(), "are pinned") {
			t.Fatalf("kubeadm joined with a pin of another CA: %v", err)
		}
	})

	t.Run("revoked token", func(t *testing.T) {
		tok, join := claimJoin(ctx, t, spec)
		cs := admin(t)
		if err := cs.CoreV1().Secrets("kube-system").Delete(ctx, tok.SecretName(), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The bootstrap signer drops the token's signature from cluster-info once its Secret
		// is gone; kubeadm then finds none.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cm, err := cs.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
			return err == nil && cm.Data[bootstrapapi.JWSSignatureKeyPrefix+tok.ID] == "", nil
		})
		if err != nil {
			t.Fatalf("cluster-info keeps the revoked token's signature: %v", err)
		}
		_, err = tl.KubeletStart(ctx, "", withDiscoveryTimeout(t, join, 5*time.Second))
		if err == nil || !strings.Contains(err.Error(), "could not find a JWS signature in the cluster-info ConfigMap for token ID \""+tok.ID+"\"") {
			t.Fatalf("kubeadm joined with a revoked token: %v", err)
		}
	})
}

// otherCAHash is the discovery pin of a CA that is not the cluster's.
func otherCAHash(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bootstrap.CACertHash(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return hash
}
