// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package controlplane_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/preflight"
	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

var controlPlane *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, &controlPlane, controlplane.Options{CRDs: controlplane.DefaultCRDs()}))
}

func admin(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(controlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func whoAmI(ctx context.Context, cfg *rest.Config) (authenticationv1.UserInfo, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return review.Status.UserInfo, nil
}

func mintToken(ctx context.Context, t *testing.T, expires time.Time) bootstrap.Token {
	t.Helper()
	tok, err := testenv.MintToken(ctx, admin(t), expires, "testenv "+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestBootstrapTokenJoin walks a kubelet's join against the real control plane: bootstrap-token
// authentication, a CSR approved and signed by kube-controller-manager, and a Node created by
// the node itself under the Node authorizer and NodeRestriction.
func TestBootstrapTokenJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))

	// The API server's token authenticator reads Secrets through its own informer: a token
	// is accepted a moment after its Secret is created, as with kubeadm.
	var user authenticationv1.UserInfo
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		user, err = whoAmI(ctx, sim.TokenConfig(controlPlane.Server, controlPlane.CAPEM, tok.String()))
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("authenticating with the bootstrap token: %v", err)
	}
	if user.Username != "system:bootstrap:"+tok.ID {
		t.Errorf("token authenticated as %q, want system:bootstrap:%s", user.Username, tok.ID)
	}
	for _, g := range []string{"system:bootstrappers", bootstrap.DefaultGroup} {
		if !slices.Contains(user.Groups, g) {
			t.Errorf("token groups %v lack %s", user.Groups, g)
		}
	}

	const nodeName = "join-test-node"
	creds, err := sim.TLSBootstrap(ctx, sim.TokenConfig(controlPlane.Server, controlPlane.CAPEM, tok.String()), nodeName)
	if err != nil {
		t.Fatalf("TLS bootstrap: %v", err)
	}
	block, _ := pem.Decode(creds.CertPEM)
	if block == nil {
		t.Fatal("signed certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:"+nodeName || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("certificate subject = %v, want CN=system:node:%s O=system:nodes", cert.Subject, nodeName)
	}
	caBlock, _ := pem.Decode(controlPlane.CAPEM)
	if caBlock == nil {
		t.Fatal("cluster CA is not PEM")
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		t.Errorf("certificate not signed by the cluster CA: %v", err)
	}
	csrs, err := admin(t).CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approved := false
	for _, c := range csrs.Items {
		if c.Spec.Username != tok.Username() {
			continue
		}
		for _, cond := range c.Status.Conditions {
			approved = approved || (cond.Type == certificatesv1.CertificateApproved && cond.Reason == "AutoApproved")
		}
	}
	if !approved {
		t.Errorf("no CSR by %s was auto-approved by kube-controller-manager", tok.Username())
	}

	nodeCfg := sim.NodeConfig(controlPlane.Server, controlPlane.CAPEM, creds)
	user, err = whoAmI(ctx, nodeCfg)
	if err != nil {
		t.Fatalf("authenticating with the node certificate: %v", err)
	}
	if user.Username != "system:node:"+nodeName {
		t.Errorf("node certificate authenticated as %q", user.Username)
	}
	nodeClient, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: corev1.NodeSpec{ProviderID: "sim://" + nodeName}}
	created, err := nodeClient.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node creating its own Node: %v", err)
	}
	if created.Spec.ProviderID != "sim://"+nodeName {
		t.Errorf("providerID = %q", created.Spec.ProviderID)
	}
	// The Node authorizer and NodeRestriction are live: a node cannot create another node.
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}
	if _, err := nodeClient.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("creating another node's Node: got %v, want Forbidden", err)
	}
	// Neither can the bootstrap token act as a node.
	tokenClient, err := kubernetes.NewForConfig(sim.TokenConfig(controlPlane.Server, controlPlane.CAPEM, tok.String()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokenClient.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("creating a Node with the bootstrap token: got %v, want Forbidden", err)
	}
}

// TestExpiredTokenRefused shows the API server refuses a token once it has expired (the same
// token was accepted before) and kube-controller-manager's token cleaner removes its Secret.
func TestExpiredTokenRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	cfg := sim.TokenConfig(controlPlane.Server, controlPlane.CAPEM, tok.String())
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := whoAmI(ctx, cfg)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the fresh token was never accepted: %v", err)
	}
	secrets := admin(t).CoreV1().Secrets(metav1.NamespaceSystem)
	secret, err := secrets.Get(ctx, tok.SecretName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-apiserver caches successful token authentications for 10s.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := whoAmI(ctx, cfg)
		return apierrors.IsUnauthorized(err), nil
	})
	if err != nil {
		t.Fatalf("the expired token is still accepted: %v", err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := secrets.Get(ctx, tok.SecretName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("token cleaner did not delete the expired token secret: %v", err)
	}
}

// TestClusterInfoSigned shows discovery works the kubeadm way: the bootstrap signer signs the
// public cluster-info with every valid token, and anonymous clients may read it.
func TestClusterInfoSigned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	anon, err := kubernetes.NewForConfig(&rest.Config{Host: controlPlane.Server, TLSClientConfig: rest.TLSClientConfig{CAData: controlPlane.CAPEM}})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cm, err := anon.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cm.Data[bootstrapapi.JWSSignatureKeyPrefix+tok.ID] != "", nil
	})
	if err != nil {
		t.Fatalf("cluster-info signed for token %s: %v", tok.ID, err)
	}
}

// TestJoinPreflight runs the fulfiller's join preflight against the real authorizer: it
// passes on the cluster kubeadm's init phases made, and names what is missing when one of
// kubeadm's objects is removed: a binding of the bootstrapper RBAC, a Role binding that lets
// tokens read kubeadm's ConfigMaps, or one of those ConfigMaps (a control plane kubeadm did
// not make has none).
func TestJoinPreflight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(controlPlane.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := preflight.Check(ctx, c, c); err != nil || f != nil {
		t.Fatalf("preflight on a complete cluster: %+v, %v", f, err)
	}
	for _, tc := range []struct {
		obj     client.Object
		key     client.ObjectKey
		reason  string
		message string
	}{
		{&rbacv1.ClusterRoleBinding{}, client.ObjectKey{Name: "kubeadm:kubelet-bootstrap"}, v1alpha1.ReasonBootstrapRBACMissing, "system:node-bootstrapper"},
		{&rbacv1.ClusterRoleBinding{}, client.ObjectKey{Name: "kubeadm:node-autoapprove-bootstrap"}, v1alpha1.ReasonCSRAutoApprovalMissing, "nodeclient"},
		{&rbacv1.RoleBinding{}, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm:nodes-kubeadm-config"}, v1alpha1.ReasonKubeadmConfigForbidden, "may not read kube-system/kubeadm-config"},
		{&rbacv1.RoleBinding{}, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm:kubelet-config"}, v1alpha1.ReasonKubeadmConfigForbidden, "may not read kube-system/kubelet-config"},
		{&corev1.ConfigMap{}, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, v1alpha1.ReasonKubeadmConfigMissing, "kube-system/kubeadm-config is missing"},
		{&corev1.ConfigMap{}, client.ObjectKey{Namespace: "kube-system", Name: "kubelet-config"}, v1alpha1.ReasonKubeadmConfigMissing, "upload-config kubelet"},
	} {
		t.Run(tc.key.Name, func(t *testing.T) {
			if err := c.Get(ctx, tc.key, tc.obj); err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(ctx, tc.obj); err != nil {
				t.Fatal(err)
			}
			var got *preflight.Failure
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
				var err error
				got, err = preflight.Check(ctx, c, c)
				return got != nil && got.Reason == tc.reason, err
			})
			restored := tc.obj.DeepCopyObject().(client.Object)
			restored.SetResourceVersion("")
			restored.SetUID("")
			if cerr := c.Create(ctx, restored); cerr != nil {
				t.Fatalf("restoring %s: %v", tc.key, cerr)
			}
			if err != nil {
				t.Fatalf("without %s: preflight said %+v, want %s: %v", tc.key, got, tc.reason, err)
			}
			if !strings.Contains(got.Message, tc.message) || len(got.Message) > v1alpha1.MaxMessageLength {
				t.Errorf("without %s: message %q does not say %q in at most %d bytes", tc.key, got.Message, tc.message, v1alpha1.MaxMessageLength)
			}
		})
	}
	if f, err := preflight.Check(ctx, c, c); err != nil || f != nil {
		t.Fatalf("preflight with every object restored: %+v, %v", f, err)
	}
}

// TestKubeadmInit: kubeadm's init phases left what `kubeadm join` reads with a bootstrap
// token right after discovery, readable with a live token: the ClusterConfiguration of the
// API server's version and the KubeletConfiguration; and no token of their own.
func TestKubeadmInit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := admin(t)
	tokens, err := cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstrapapi.SecretTypeBootstrapToken)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range tokens.Items {
		if strings.Contains(string(s.Data[bootstrapapi.BootstrapTokenDescriptionKey]), "bootstrap-token phase") {
			t.Errorf("the init phase's token %s is left", s.Name)
		}
	}
	version, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	var node kubernetes.Interface
	if node, err = kubernetes.NewForConfig(sim.TokenConfig(controlPlane.Server, controlPlane.CAPEM, tok.String())); err != nil {
		t.Fatal(err)
	}
	var kubeadmConfig *corev1.ConfigMap
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		kubeadmConfig, err = node.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
		return err == nil, nil // the token is accepted a moment after its Secret exists
	})
	if err != nil {
		t.Fatalf("reading kubeadm-config with a bootstrap token: %v", err)
	}
	cluster := kubeadmConfig.Data["ClusterConfiguration"]
	for _, want := range []string{"kind: ClusterConfiguration", "kubernetesVersion: " + version.GitVersion} {
		if !strings.Contains(cluster, want) {
			t.Errorf("kubeadm-config's ClusterConfiguration lacks %q:\n%s", want, cluster)
		}
	}
	kubelet, err := node.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading kubelet-config with a bootstrap token: %v", err)
	}
	if !strings.Contains(kubelet.Data["kubelet"], "kind: KubeletConfiguration") {
		t.Errorf("kubelet-config holds no KubeletConfiguration: %v", kubelet.Data)
	}
}

// TestTokenAuthProbe: the probe's token authenticates on a cluster with bootstrap-token
// authentication, and the probe names the missing flag on one without; its token is gone.
func TestTokenAuthProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	check := func(cp *controlplane.ControlPlane) *preflight.Failure {
		t.Helper()
		c, err := client.New(cp.Config, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		probe := &preflight.TokenAuthProbe{Client: c, Config: cp.Config, Wait: 5 * time.Second}
		f, err := probe.Check(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		left := &corev1.SecretList{}
		if err := c.List(ctx, left, client.InNamespace("kube-system"), client.HasLabels{preflight.Label}); err != nil {
			t.Fatal(err)
		}
		if len(left.Items) != 0 {
			t.Errorf("%d preflight tokens left", len(left.Items))
		}
		return f
	}
	if f := check(controlPlane); f != nil {
		t.Fatalf("probe on a cluster that authenticates bootstrap tokens: %+v", f)
	}
	off, err := controlplane.Start(ctx, controlplane.Options{DisableBootstrapTokenAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := off.Stop(); err != nil {
			t.Error(err)
		}
	}()
	f := check(off)
	if f == nil || f.Reason != v1alpha1.ReasonBootstrapTokenAuthDisabled || !strings.Contains(f.Message, "--enable-bootstrap-token-auth") {
		t.Fatalf("probe without bootstrap-token authentication: %+v", f)
	}
}
