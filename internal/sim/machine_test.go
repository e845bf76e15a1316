// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// TestMachineJoins boots a machine with a valid token: it discovers the cluster, TLS
// bootstraps, registers its Node as itself and keeps it alive; powered off it stops
// heartbeating and leaves the Node; restarted after its token was revoked, it comes back as
// the same node with the credentials it kept.
func TestMachineJoins(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "sim-joins"
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	dir := t.TempDir()
	cfg := MachineConfig{
		Name:              name,
		UserDataPath:      writeUserData(t, dir, joinSpec(t, name, tok)),
		Capacity:          testCapacity(),
		HeartbeatInterval: 300 * time.Millisecond,
		StateDir:          filepath.Join(dir, "state"),
	}
	run := startMachine(t, cfg)
	node := waitForNode(ctx, t, name, nodeReady)

	if node.Spec.ProviderID != "sim://"+name {
		t.Errorf("providerID = %q, want sim://%s", node.Spec.ProviderID, name)
	}
	wantLabels := map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
	}
	for k, v := range testLabels {
		wantLabels[k] = v
	}
	for k, v := range wantLabels {
		if node.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(tt corev1.Taint) bool {
		return tt.Key == "karpenter.sh/unregistered" && tt.Effect == corev1.TaintEffectNoExecute
	}) {
		t.Errorf("taints = %v, want karpenter.sh/unregistered:NoExecute", node.Spec.Taints)
	}
	for res, want := range map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "pods": "110", "nvidia.com/gpu": "1"} {
		if got := node.Status.Capacity[res]; got.String() != want {
			t.Errorf("capacity %s = %s, want %s", res, got.String(), want)
		}
	}
	// The user data sets no reservations but the kubelet's default eviction thresholds:
	// memory.available<100Mi comes off allocatable memory.
	for res, want := range map[corev1.ResourceName]string{"cpu": "2", "memory": "3996Mi", "pods": "110", "nvidia.com/gpu": "1"} {
		if got := node.Status.Allocatable[res]; got.String() != want {
			t.Errorf("allocatable %s = %s, want %s", res, got.String(), want)
		}
	}
	if node.Status.NodeInfo.KubeletVersion != KubeletVersion {
		t.Errorf("kubelet version = %q", node.Status.NodeInfo.KubeletVersion)
	}
	if c := condition(node, corev1.NodeReady); c.Reason != "KubeletReady" {
		t.Errorf("Ready reason = %q, want KubeletReady", c.Reason)
	}
	for _, typ := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if c := condition(node, typ); c == nil || c.Status != corev1.ConditionFalse {
			t.Errorf("condition %s = %v, want False", typ, c)
		}
	}
	if !slices.Contains(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}) {
		t.Errorf("addresses = %v, want InternalIP 127.0.0.1", node.Status.Addresses)
	}
	// The Node was created by the node itself: its CSR (by the token's user) was approved.
	csrs, err := admin(t).CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(csrs.Items, func(c certificatesv1.CertificateSigningRequest) bool {
		return c.Spec.Username == tok.Username() && len(c.Status.Certificate) > 0
	}) {
		t.Errorf("no signed CSR by %s", tok.Username())
	}

	// The node lifecycle controller believes it: it lifts the not-ready taint that
	// admission put on the new Node.
	waitForNode(ctx, t, name, func(n *corev1.Node) bool {
		return !slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == corev1.TaintNodeNotReady })
	})

	// The kubelet heartbeats: its Lease is renewed and the Ready heartbeat refreshed.
	renewals := leaseRenewals(ctx, t, name, 3)
	if renewals[0].Equal(&renewals[len(renewals)-1]) {
		t.Errorf("Lease renew times did not advance: %v", renewals)
	}
	firstBeat := condition(node, corev1.NodeReady).LastHeartbeatTime
	waitForNode(ctx, t, name, func(n *corev1.Node) bool {
		return condition(n, corev1.NodeReady).LastHeartbeatTime.After(firstBeat.Time)
	})

	if err := run.powerOff(t); err != nil {
		t.Fatalf("RunMachine after power-off = %v, want nil", err)
	}
	last := leaseRenewals(ctx, t, name, 1)[0]
	stillCtx, stillCancel := context.WithTimeout(ctx, 4*cfg.HeartbeatInterval)
	defer stillCancel()
	if renewed := leaseRenewedAfter(stillCtx, t, name, last); renewed {
		t.Error("the Lease is still renewed after power-off")
	}
	if _, err := admin(t).CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("the Node should stay after power-off: %v", err)
	}
	log := run.log.String()
	for _, want := range []string{"registered Node " + name, "powered off"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, tok.Secret) {
		t.Errorf("the log shows the token secret:\n%s", log)
	}
	if info, err := os.Stat(filepath.Join(cfg.StateDir, kubeletKubeconfig)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("kubelet credentials on disk: %v, mode %v; want 0600", err, info)
	}

	// The controller revokes the token once the node registered; a reboot needs none.
	if err := admin(t).CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, tok.SecretName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	bootID := node.Status.NodeInfo.BootID
	rerun := startMachine(t, cfg)
	waitForNode(ctx, t, name, func(n *corev1.Node) bool { return n.Status.NodeInfo.BootID != bootID && nodeReady(n) })
	waitForLog(ctx, t, rerun.log, "exists already")
	if renewed := leaseRenewedAfter(ctx, t, name, last); !renewed {
		t.Error("the restarted machine does not renew its Lease")
	}
	if err := rerun.powerOff(t); err != nil {
		t.Fatalf("restarted RunMachine after power-off = %v, want nil", err)
	}
}

// leaseRenewals polls the node's Lease until it has seen n distinct renew times.
func leaseRenewals(ctx context.Context, t *testing.T, name string, n int) []metav1.MicroTime {
	t.Helper()
	var seen []metav1.MicroTime
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		lease, err := admin(t).CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if lease.Spec.RenewTime == nil {
			return false, nil
		}
		if len(seen) == 0 || !seen[len(seen)-1].Equal(lease.Spec.RenewTime) {
			seen = append(seen, *lease.Spec.RenewTime)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != name {
			return false, nil
		}
		return len(seen) >= n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d renewals of Lease %s: %v (seen %d)", n, name, err, len(seen))
	}
	return seen
}

// leaseRenewedAfter reports whether the Lease is renewed after last before ctx ends.
func leaseRenewedAfter(ctx context.Context, t *testing.T, name string, last metav1.MicroTime) bool {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		lease, err := admin(t).CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(last.Time), nil
	})
	return err == nil
}

// TestMachineRefusesBadJoin: a token that would not work on a real machine does not work
// here either, and the error says why.
func TestMachineRefusesBadJoin(t *testing.T) {
	t.Parallel()
	otherCA := selfSignedCA(t)
	otherHash, err := bootstrap.CACertHash(otherCA)
	if err != nil {
		t.Fatal(err)
	}
	type specFunc func(ctx context.Context, t *testing.T, name string) bootstrap.JoinSpec
	// Tokens the bootstrap signer never signs fail when discovery times out; for the others
	// the signature comes within a second, and the timeout is only a bound.
	const neverSigned, signed = 4 * time.Second, 30 * time.Second
	cases := []struct {
		name    string
		spec    specFunc
		timeout time.Duration
		wantErr []string
	}{{
		name: "expired token",
		spec: func(ctx context.Context, t *testing.T, name string) bootstrap.JoinSpec {
			return joinSpec(t, name, mintToken(ctx, t, time.Now().Add(-time.Minute)))
		},
		timeout: neverSigned,
		wantErr: []string{"carries no signature for token", "expired"},
	}, {
		name: "unknown token",
		spec: func(ctx context.Context, t *testing.T, name string) bootstrap.JoinSpec {
			tok, err := bootstrap.NewToken()
			if err != nil {
				t.Fatal(err)
			}
			return joinSpec(t, name, tok)
		},
		timeout: neverSigned,
		wantErr: []string{"carries no signature for token", "does not exist"},
	}, {
		name: "wrong token secret",
		spec: func(ctx context.Context, t *testing.T, name string) bootstrap.JoinSpec {
			tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
			tok.Secret = strings.Repeat("x", len(tok.Secret))
			return joinSpec(t, name, tok)
		},
		timeout: signed,
		wantErr: []string{"signature does not verify", "token secret is wrong"},
	}, {
		name: "wrong CA hash",
		spec: func(ctx context.Context, t *testing.T, name string) bootstrap.JoinSpec {
			spec := joinSpec(t, name, mintToken(ctx, t, time.Now().Add(10*time.Minute)))
			spec.CACertHash = otherHash
			return spec
		},
		timeout: signed,
		wantErr: []string{"matches none of the pinned caCertHashes", otherHash},
	}}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := "sim-bad-join-" + string(rune('a'+i))
			spec := tc.spec(ctx, t, name)
			dir := t.TempDir()
			run := startMachine(t, MachineConfig{
				Name:             name,
				UserDataPath:     writeUserData(t, dir, spec),
				DiscoveryTimeout: tc.timeout,
				StateDir:         filepath.Join(dir, "state"),
			})
			err := run.wait(t, tc.timeout+15*time.Second)
			if err == nil {
				t.Fatal("RunMachine joined, want an error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if strings.Contains(err.Error(), spec.Token.Secret) || strings.Contains(run.log.String(), spec.Token.Secret) {
				t.Error("the error or log shows the token secret")
			}
			if _, err := admin(t).CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("Node %s: got %v, want NotFound", name, err)
			}
		})
	}
}

// TestNeverJoin: the machine boots, reads its user data and idles without joining.
func TestNeverJoin(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "sim-never-joins"
	tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
	dir := t.TempDir()
	run := startMachine(t, MachineConfig{Name: name, UserDataPath: writeUserData(t, dir, joinSpec(t, name, tok)), NeverJoin: true})
	waitForLog(ctx, t, run.log, "never joins")
	// Give a joining machine ample time to have sent its CSR, then look.
	idle, idleCancel := context.WithTimeout(ctx, 2*time.Second)
	defer idleCancel()
	<-idle.Done()
	select {
	case err := <-run.done:
		t.Fatalf("RunMachine returned %v while powered on", err)
	default:
	}
	csrs, err := admin(t).CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csrs.Items {
		if c.Spec.Username == tok.Username() {
			t.Errorf("a never-join machine submitted CSR %s", c.Name)
		}
	}
	if _, err := admin(t).CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Node %s: got %v, want NotFound", name, err)
	}
	if err := run.powerOff(t); err != nil {
		t.Errorf("RunMachine after power-off = %v, want nil", err)
	}
}

// TestBootDelay: nothing happens before the boot delay passed, and power-off interrupts it.
func TestBootDelay(t *testing.T) {
	t.Parallel()
	t.Run("joins after the delay", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const name, delay = "sim-boot-delay", 2 * time.Second
		tok := mintToken(ctx, t, time.Now().Add(10*time.Minute))
		dir := t.TempDir()
		start := time.Now()
		startMachine(t, MachineConfig{Name: name, UserDataPath: writeUserData(t, dir, joinSpec(t, name, tok)), BootDelay: delay})
		waitForNode(ctx, t, name, nodeReady)
		if elapsed := time.Since(start); elapsed < delay {
			t.Errorf("Node registered %s after power-on, before the %s boot delay", elapsed, delay)
		}
	})
	t.Run("powered off while booting", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The user data does not exist: a machine that reads it before booting fails.
		run := startMachine(t, MachineConfig{Name: "sim-never-booted", UserDataPath: filepath.Join(t.TempDir(), "absent"), BootDelay: time.Hour})
		waitForLog(ctx, t, run.log, "powered on")
		if err := run.powerOff(t); err != nil {
			t.Errorf("RunMachine after power-off while booting = %v, want nil", err)
		}
	})
}

// TestVerifyDetachedJWS checks the verifier against a signature made by
// k8s.io/cluster-bootstrap/token/jws.ComputeDetachedSignature (what the bootstrap signer uses).
func TestVerifyDetachedJWS(t *testing.T) {
	const (
		content = "apiVersion: v1\nkind: Config\n"
		sig     = "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..vH_kT4yiol-nrAWgjfCYqvum5wsKETXe0S7OOp1VgnE"
	)
	tok := bootstrap.Token{ID: "abcdef", Secret: "0123456789abcdef"}
	if err := verifyDetachedJWS(sig, content, tok); err != nil {
		t.Fatalf("valid signature: %v", err)
	}
	for _, tc := range []struct {
		name         string
		sig, content string
		tok          bootstrap.Token
	}{
		{"wrong secret", sig, content, bootstrap.Token{ID: "abcdef", Secret: "0123456789abcdeX"}},
		{"wrong key id", sig, content, bootstrap.Token{ID: "abcdeX", Secret: "0123456789abcdef"}},
		{"other content", sig, content + "#", tok},
		{"attached payload", strings.Replace(sig, "..", ".eA.", 1), content, tok},
		{"not a JWS", "garbage", content, tok},
	} {
		if err := verifyDetachedJWS(tc.sig, tc.content, tc.tok); err == nil {
			t.Errorf("%s: verified, want an error", tc.name)
		}
	}
}

func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another-cluster-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
