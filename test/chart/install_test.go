// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

const (
	releaseNS = "fulfiller-system"
	// stateNS holds the claims' states and locks: the chart's default, "<release namespace>-states".
	stateNS = releaseNS + "-states"
)

// TestInstall installs chart 0.1.0 into the real control plane the way its README said, with
// a NodeClass and a NodePool, and upgrades it to the packaged charts of this version (the CRD
// chart adopting the CRDs, the fulfiller chart with the values file of 0.1.0): the CRDs are
// the same objects afterwards, so no object of theirs went. This version's controller then
// takes a claim to a joined node, and the release is upgraded again with the claim live (the
// CRD chart to one whose TofuNodeClass has one more field, which is served afterwards; the
// fulfiller chart with the runner settings, which restarts the controller): the claim keeps
// its Fulfillment, NodeClaim, node, machine and state, and no run was started for it. Against
// the upgraded release it checks what helm created, asks the authorizer what each
// ServiceAccount may do, runs tofu with the kubernetes backend as the runner ServiceAccount,
// has the controller destroy the claim with a runner pod that has the runner settings, and
// checks that the state encryption passphrase and the CRDs survive the upgrades and an
// uninstall.
//
// The controller does not run under chart 0.1.0's RBAC: the binary built here is this
// version's, whose join preflight reads kubeadm's ConfigMaps, which 0.1.0's controller did
// not read and its RBAC did not grant. Each upgrade is as helm does it: the RBAC of the new
// release is in place before its controller starts.
func TestInstall(t *testing.T) {
	ctx := ctxFor(t, 15*time.Minute)
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	ext := apiextensionsclient.NewForConfigOrDie(cp.Config)
	h := newHarness(ctx, t, cs)
	t.Run("controller refuses to start without Karpenter's CRDs", func(t *testing.T) { h.refusesWithoutCRDs(ctx, t) })

	// Chart 0.1.0 as its README said: Karpenter's CRDs of the embedded core with
	// `kubectl apply --server-side` (make karpenter-crds did), the fulfiller's in its crds/.
	applyKarpenterCRDs(ctx, t)
	for _, crd := range karpenterCRDNames {
		waitEstablished(ctx, t, ext, crd)
	}
	// The release namespace enforces the restricted Pod Security level: the API server's
	// admission checks the controller's pods and every runner pod.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every feature gate the values have, on, by chart 0.1.0's names: the controller must
	// start with each of them, and the upgrades keep the values file.
	oldValues := allFeatureGates(t, true)
	if out, err := helmCmd(t, "install", "fulfiller", previousChart, "--kubeconfig", cp.Kubeconfig, "--namespace", releaseNS,
		"--timeout", "2m", "-f", oldValues, "--set", "clusterName="+testClusterName); err != nil {
		t.Fatalf("installing chart 0.1.0: %v\n%s", err, out)
	}
	for _, crd := range fulfillerCRDNames {
		waitEstablished(ctx, t, ext, crd)
	}
	// The chart renders no passphrase (helm template would make a new one each time): the
	// controller creates it on its first start.
	if _, err := cs.CoreV1().Secrets(releaseNS).Get(ctx, "fulfiller-state-encryption", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the passphrase Secret before the controller ever ran: %v", err)
	}
	// What an administrator made under chart 0.1.0: the example NodeClass and NodePool.
	class := h.createNodeClass(ctx, t)
	crdsBefore, classBefore := crdUIDs(ctx, t, ext), h.uid(ctx, t, tofuNodeClassesGVR, class)

	// The upgrade from 0.1.0: the CRD chart adopts the CRDs that chart 0.1.0 and kubectl
	// installed (--take-ownership, once), then the fulfiller chart with the same values file.
	chartPackage, crdChartPackage := packaged(t)
	if out, err := helmCmd(t, "install", "fulfiller-crd", crdChartPackage, "--kubeconfig", cp.Kubeconfig, "--namespace", releaseNS,
		"--take-ownership"); err != nil {
		t.Fatalf("installing the CRD chart over the CRDs of chart 0.1.0: %v\n%s", err, out)
	}
	for _, crd := range crdChartNames {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Annotations["meta.helm.sh/release-name"] != "fulfiller-crd" || got.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s after the CRD chart's install: annotations %v", crd, got.Annotations)
		}
	}
	out, err := helmCmd(t, "upgrade", "fulfiller", chartPackage, "--kubeconfig", cp.Kubeconfig, "--namespace", releaseNS,
		"--timeout", "2m", "-f", oldValues, "--set", "clusterName="+testClusterName)
	if err != nil {
		t.Fatal(err)
	}
	// NOTES.txt: the passphrase to reference, the old names the values use, no CRD warning.
	_, notes, ok := strings.Cut(out, "NOTES:")
	if !ok || !strings.Contains(notes, "name: fulfiller-state-encryption") || strings.Contains(notes, "were not found") ||
		!strings.Contains(notes, "- clusterName: use settings.clusterName") || !strings.Contains(notes, "- settings.featureGates.NodeRepair: use settings.featureGates.nodeRepair") {
		t.Errorf("helm upgrade's output and notes:\n%s", out)
	}
	// A CRD deleted and created again (a new UID) would have taken every object of its kind.
	if after := crdUIDs(ctx, t, ext); !reflect.DeepEqual(after, crdsBefore) {
		t.Errorf("the upgrade from chart 0.1.0 replaced CRDs:\nbefore %v\nafter  %v", crdsBefore, after)
	}
	if after := h.uid(ctx, t, tofuNodeClassesGVR, class); after != classBefore {
		t.Errorf("the NodeClass made under chart 0.1.0 is %q after the upgrade, was %q", after, classBefore)
	}

	// This version's controller, as the upgraded Deployment runs it. It makes the passphrase
	// on its first start; the release does not own it.
	ctl := h.startController(ctx, t)
	holder := ctl.waitReady(ctx, t, cs, "")
	passphrase := readPassphrase(ctx, t, cs)
	if secret, err := cs.CoreV1().Secrets(releaseNS).Get(ctx, "fulfiller-state-encryption", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if secret.Labels["app.kubernetes.io/managed-by"] == "Helm" || secret.Annotations["meta.helm.sh/release-name"] != "" {
		t.Errorf("the passphrase Secret belongs to the helm release: %v %v", secret.Labels, secret.Annotations)
	}
	h.waitNodeClassReady(ctx, t, ctl, class)
	first := h.claimNode(ctx, t, ctl, "needs-a-node")
	before := h.fleet(ctx, t)
	if len(before.Fulfillments) != 1 || len(before.Machines) != 1 || len(before.States) != 1 {
		t.Errorf("before the upgrade: %+v, want one claim's Fulfillment, machine and state", before)
	}

	// An upgrade with the claim live, CRDs first: the CRD chart of a next release whose
	// TofuNodeClass has one more field, then the fulfiller chart with the same values file and
	// the runner settings.
	t.Run("CRD chart upgrade serves a new field", func(t *testing.T) {
		crdUpgradeAddsAField(ctx, t, ext)
	})
	runnerValues := filepath.Join(t.TempDir(), "runner.yaml")
	writeFile(t, runnerValues, `
imagePullSecrets: [{name: registry}]
runner:
  podLabels: {example.com/team: platform}
  podAnnotations: {example.com/cost-center: "42"}
  env: [{name: EXAMPLE_SETTING, value: "on"}]
  extraVolumes: [{name: ca, configMap: {name: ca-bundle}}]
  extraVolumeMounts: [{name: ca, mountPath: /etc/ssl/extra, readOnly: true}]
`)
	if out, err := helmCmd(t, "upgrade", "fulfiller", chartPackage, "--kubeconfig", cp.Kubeconfig, "--namespace", releaseNS,
		"--timeout", "2m", "-f", oldValues, "--set", "clusterName="+testClusterName, "-f", runnerValues); err != nil {
		t.Fatalf("upgrading with the runner settings: %v\n%s", err, out)
	}
	// The controller restarts with the upgraded Deployment, as its rollout would restart it.
	ctl.stop()
	ctl = h.startController(ctx, t)
	ctl.waitReady(ctx, t, cs, holder)
	// Once it has reconciled every Fulfillment, nothing the claim bought has changed.
	ctl.poll(ctx, t, "the restarted controller to reconcile the Fulfillments", time.Minute, func(ctx context.Context) (bool, error) {
		n, err := ctl.reconciles(ctx, "fulfillment")
		return err == nil && n >= float64(len(before.Fulfillments)), nil
	})
	if got := readPassphrase(ctx, t, cs); !bytes.Equal(got, passphrase) {
		t.Error("helm upgrade replaced the state encryption passphrase")
	}
	if after := h.fleet(ctx, t); !reflect.DeepEqual(after, before) {
		t.Errorf("the upgrade changed the fleet:\nbefore %+v\nafter  %+v", before, after)
	}
	if out, err := helmCmd(t, "history", "fulfiller", "--kubeconfig", cp.Kubeconfig, "--namespace", releaseNS); err != nil ||
		!strings.Contains(out, "fulfiller-0.1.0") || !strings.Contains(out, "fulfiller-"+chartVersion(t, chart)) {
		t.Errorf("helm history: %v\n%s", err, out)
	}

	// The states' namespace, kept on uninstall.
	if ns, err := cs.CoreV1().Namespaces().Get(ctx, stateNS, metav1.GetOptions{}); err != nil {
		t.Errorf("the state namespace: %v", err)
	} else if ns.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the state namespace %s is not kept on uninstall: %v", stateNS, ns.Annotations)
	}

	// What helm created is served by the API server: the Deployment and the ServiceAccounts.
	dep, err := cs.AppsV1().Deployments(releaseNS).Get(ctx, "fulfiller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Deployment was not created: %v", err)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "fulfiller" {
		t.Errorf("Deployment runs as %q", dep.Spec.Template.Spec.ServiceAccountName)
	}
	for _, sa := range []string{"fulfiller", "fulfiller-runner"} {
		if _, err := cs.CoreV1().ServiceAccounts(releaseNS).Get(ctx, sa, metav1.GetOptions{}); err != nil {
			t.Errorf("ServiceAccount %s: %v", sa, err)
		}
	}

	// The authorizer's table: a runner may use the states and their locks, and nothing else —
	// no Secret that is not a state (the passphrase, credentials, user data with a live join
	// token, run requests, bootstrap tokens), no Lease that is not a lock.
	t.Run("runner RBAC", func(t *testing.T) {
		runner := serviceAccountUser("fulfiller-runner")
		for _, a := range []access{
			{"get", "", "secrets", stateNS, "tfstate-default-claim-a", true},
			{"list", "", "secrets", stateNS, "", true},
			{"create", "", "secrets", stateNS, "", true},
			{"update", "", "secrets", stateNS, "tfstate-default-claim-a", true},
			{"delete", "", "secrets", stateNS, "tfstate-default-claim-a", true},
			{"get", "coordination.k8s.io", "leases", stateNS, "lock-tfstate-default-claim-a", true},
			{"create", "coordination.k8s.io", "leases", stateNS, "", true},
			{"update", "coordination.k8s.io", "leases", stateNS, "lock-tfstate-default-claim-a", true},
			{"delete", "coordination.k8s.io", "leases", stateNS, "lock-tfstate-default-claim-a", true},
			// No Secret of the release namespace: the passphrase, credentials, user data, requests.
			{"get", "", "secrets", releaseNS, "fulfiller-state-encryption", false},
			{"get", "", "secrets", releaseNS, "hcloud", false},
			{"get", "", "secrets", releaseNS, "claim-a-userdata", false},
			{"get", "", "secrets", releaseNS, "claim-a-apply-1", false},
			{"list", "", "secrets", releaseNS, "", false},
			{"watch", "", "secrets", releaseNS, "", false},
			{"create", "", "secrets", releaseNS, "", false},
			// No leader election.
			{"get", "coordination.k8s.io", "leases", releaseNS, "fulfiller-leader-election", false},
			{"update", "coordination.k8s.io", "leases", releaseNS, "fulfiller-leader-election", false},
			{"create", "coordination.k8s.io", "leases", releaseNS, "", false},
			// Nothing elsewhere.
			{"get", "", "secrets", "kube-system", "bootstrap-token-abcdef", false},
			{"list", "", "secrets", "kube-system", "", false},
			{"get", "", "secrets", "default", "", false},
			{"list", "", "secrets", "", "", false},
			{"create", "coordination.k8s.io", "leases", "kube-system", "", false},
			{"create", "", "pods", releaseNS, "", false},
			{"create", "batch", "jobs", releaseNS, "", false},
			{"get", "", "pods", releaseNS, "", false},
			{"create", "", "pods", stateNS, "", false},
			{"get", "", "configmaps", stateNS, "", false},
			{"list", "", "nodes", "", "", false},
			{"list", "fulfiller.sh", "fulfillments", "", "", false},
			{"get", "fulfiller.sh", "tofunodeclasses", "", "sim", false},
			{"create", "authorization.k8s.io", "subjectaccessreviews", "", "", false},
		} {
			a.check(ctx, t, cs, runner)
		}
	})

	t.Run("controller RBAC", func(t *testing.T) {
		controller := serviceAccountUser("fulfiller")
		for _, a := range []access{
			// Runs, claim secrets, states and locks in the release namespace.
			{"create", "batch", "jobs", releaseNS, "", true},
			{"delete", "batch", "jobs", releaseNS, "claim-a-apply-1", true},
			{"list", "batch", "jobs", releaseNS, "", true},
			{"list", "", "pods", releaseNS, "", true},
			{"get", "", "pods/log", releaseNS, "claim-a-apply-1-xyz", true},
			{"create", "", "secrets", releaseNS, "", true},
			{"list", "", "secrets", releaseNS, "", true},
			{"delete", "", "secrets", releaseNS, "claim-a-apply-1", true},
			{"get", "", "configmaps", releaseNS, "kube-root-ca.crt", true},
			// States and locks: read, a stale lock released, both removed after a destroy.
			{"get", "", "secrets", stateNS, "tfstate-default-claim-a", true},
			{"delete", "", "secrets", stateNS, "tfstate-default-claim-a", true},
			{"list", "", "secrets", stateNS, "", true}, // the orphan collector finds orphaned states
			{"get", "coordination.k8s.io", "leases", stateNS, "lock-tfstate-default-claim-a", true},
			{"update", "coordination.k8s.io", "leases", stateNS, "lock-tfstate-default-claim-a", true},
			{"delete", "coordination.k8s.io", "leases", stateNS, "lock-tfstate-default-claim-a", true},
			// A finite pool's Lease per server (Hetzner Robot): created by the pool keeper, listed,
			// leased and released by compare-and-swap.
			{"create", "coordination.k8s.io", "leases", stateNS, "", true},
			{"list", "coordination.k8s.io", "leases", stateNS, "", true},
			{"update", "coordination.k8s.io", "leases", stateNS, "inventory-robot-321", true},
			// Leader election.
			{"update", "coordination.k8s.io", "leases", releaseNS, "fulfiller-leader-election", true},
			{"create", "coordination.k8s.io", "leases", releaseNS, "", true},
			// Bootstrap tokens in kube-system, cluster-info, the preflight.
			{"create", "", "secrets", "kube-system", "", true},
			{"get", "", "secrets", "kube-system", "bootstrap-token-abcdef", true},
			{"patch", "", "secrets", "kube-system", "bootstrap-token-abcdef", true},
			{"list", "", "secrets", "kube-system", "", true},
			{"deletecollection", "", "secrets", "kube-system", "", true},
			{"get", "", "configmaps", "kube-public", "cluster-info", true},
			{"get", "", "configmaps", "kube-system", "kubeadm-config", true},
			{"get", "", "configmaps", "kube-system", "kubelet-config", true},
			{"create", "authorization.k8s.io", "subjectaccessreviews", "", "", true},
			// Karpenter core and the fulfiller's API.
			{"update", "karpenter.sh", "nodeclaims/status", "", "claim-a", true},
			{"create", "karpenter.sh", "nodeclaims", "", "", true},
			{"patch", "", "nodes", "", "node-a", true},
			{"list", "", "pods", "", "", true},
			{"create", "", "pods/eviction", "ns1", "", true},
			{"create", "", "events", "default", "", true},
			{"delete", "coordination.k8s.io", "leases", "kube-node-lease", "node-a", true},
			{"create", "fulfiller.sh", "fulfillments", "", "", true},
			{"update", "fulfiller.sh", "fulfillments/status", "", "claim-a", true},
			{"create", "fulfiller.sh", "bootreports", releaseNS, "", true},
			{"delete", "fulfiller.sh", "bootreports", releaseNS, "claim-a", true},
			{"watch", "fulfiller.sh", "bootreports", "", "", true},
			{"patch", "fulfiller.sh", "bootreports/status", releaseNS, "claim-a", false},
			{"patch", "fulfiller.sh", "tofunodeclasses/status", "", "sim", true},
			{"watch", "fulfiller.sh", "tofunodeclasses", "", "", true},
			// Its finalizer on a class needs update and patch: the chart's admission policy
			// refuses every other change (checked below, for real).
			{"update", "fulfiller.sh", "tofunodeclasses", "", "sim", true},
			{"patch", "fulfiller.sh", "tofunodeclasses", "", "sim", true},
			// Not: Secrets elsewhere, other ConfigMaps, writing RBAC, pods directly.
			{"get", "", "secrets", "default", "db-password", false},
			{"get", "", "secrets", "other", "", false},
			{"list", "", "secrets", "", "", false},
			{"get", "", "configmaps", "kube-public", "other", false},
			{"get", "", "configmaps", "kube-system", "kube-proxy", false},
			{"list", "", "configmaps", "kube-system", "", false},
			{"create", "", "pods", releaseNS, "", false},
			{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", false},
			{"update", "coordination.k8s.io", "leases", "kube-system", "kube-controller-manager", false},
			// Not what it never does: create or delete a TofuNodeClass, write states (tofu
			// does), touch other Leases of its namespace, or anything in the state namespace
			// beyond states, locks and pool Leases.
			{"delete", "fulfiller.sh", "tofunodeclasses", "", "sim", false},
			{"create", "fulfiller.sh", "tofunodeclasses", "", "", false},
			{"create", "", "secrets", stateNS, "", false},
			{"update", "", "secrets", stateNS, "tfstate-default-claim-a", false},
			{"update", "coordination.k8s.io", "leases", releaseNS, "someone-elses-lease", false},
			{"delete", "coordination.k8s.io", "leases", releaseNS, "fulfiller-leader-election", false},
			{"create", "", "pods", stateNS, "", false},
		} {
			a.check(ctx, t, cs, controller)
		}
	})

	t.Run("controller never writes a class's spec", func(t *testing.T) {
		controllerWritesOnlyItsFinalizer(ctx, t)
	})

	t.Run("runner runs tofu with the kubernetes backend", func(t *testing.T) {
		runTofuAsRunner(ctx, t, cs)
	})

	t.Run("the claim is destroyed by a runner pod with the runner settings", func(t *testing.T) {
		if _, err := cs.CoreV1().ConfigMaps(releaseNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ca-bundle"},
			Data: map[string]string{"ca.pem": "-----BEGIN CERTIFICATE-----\n"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.destroyAll(ctx, t, ctl, []string{"needs-a-node"}, []string{first})
		checkRunnerPod(ctx, t, cs, first, "destroy")
	})
	ctl.stop()

	t.Run("passphrase and CRDs survive uninstall", func(t *testing.T) {
		if _, err := helmCmd(t, "uninstall", "fulfiller", "--kubeconfig", cp.Kubeconfig, "--namespace", releaseNS); err != nil {
			t.Fatal(err)
		}
		if got := readPassphrase(ctx, t, cs); !bytes.Equal(got, passphrase) {
			t.Fatal("the passphrase changed on uninstall")
		}
		if _, err := cs.AppsV1().Deployments(releaseNS).Get(ctx, "fulfiller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Deployment is still there after uninstall: %v", err)
		}
		if _, err := cs.CoreV1().Namespaces().Get(ctx, stateNS, metav1.GetOptions{}); err != nil {
			t.Errorf("the state namespace went with the release: %v", err)
		}
		// The CRDs stay when their chart goes: deleting one deletes every object of its kind.
		if out, err := helmCmd(t, "uninstall", "fulfiller-crd", "--kubeconfig", cp.Kubeconfig, "--namespace", releaseNS); err != nil {
			t.Fatal(err)
		} else if !strings.Contains(out, "kept due to the resource policy") {
			t.Errorf("helm uninstall fulfiller-crd: %s", out)
		}
		for _, crd := range crdChartNames {
			got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd, metav1.GetOptions{})
			if err != nil || got.DeletionTimestamp != nil {
				t.Errorf("CRD %s after helm uninstall fulfiller-crd: %v", crd, err)
			}
		}
	})
}

var (
	karpenterCRDNames = []string{"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh", "capacitybuffers.autoscaling.x-k8s.io"}
	// chart 0.1.0's CRDs of the fulfiller
	fulfillerCRDNames = []string{"tofunodeclasses.fulfiller.sh", "fulfillments.fulfiller.sh"}
	// every CRD the CRD chart has: those and the ones since 0.1.0
	crdChartNames = append(append(slices.Clone(karpenterCRDNames), fulfillerCRDNames...), "bootreports.fulfiller.sh")
)

// applyKarpenterCRDs applies the embedded Karpenter core's CRDs with
// `kubectl apply --server-side`, as `make karpenter-crds` did in chart 0.1.0's README: the
// module's own files (pkg/apis.CRDs are embedded from them).
func applyKarpenterCRDs(ctx context.Context, t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{"karpenter.sh_nodepools.yaml": karpenterapis.NodePoolCRD, "karpenter.sh_nodeclaims.yaml": karpenterapis.NodeClaimCRD,
		"karpenter.sh_nodeoverlays.yaml": karpenterapis.NodeOverlayCRD, "autoscaling.x-k8s.io_capacitybuffers.yaml": karpenterapis.CapacityBufferCRD} {
		writeFile(t, filepath.Join(dir, name), string(data))
	}
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "--server-side", "-f", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply --server-side of Karpenter's CRDs: %v\n%s", err, out)
	}
}

// checkRunnerPod checks the pod of a claim's run (apply or destroy) as the API server has
// it: the runner settings of the upgraded release, the priority the Priority admission
// resolved, and the tofu environment with the runner's prefix.
func checkRunnerPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, claim, operation string) {
	t.Helper()
	jobs, err := cs.BatchV1().Jobs(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodeclaim=" + claim + ",fulfiller.sh/operation=" + operation})
	if err != nil || len(jobs.Items) != 1 {
		t.Fatalf("%s Jobs of claim %s: %v (%d)", operation, claim, err, len(jobs.Items))
	}
	pods, err := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + jobs.Items[0].Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of Job %s: %v (%d)", jobs.Items[0].Name, err, len(pods.Items))
	}
	pod := pods.Items[0]
	if pod.Spec.PriorityClassName != "system-cluster-critical" || pod.Spec.Priority == nil || *pod.Spec.Priority != 2000000000 {
		t.Errorf("runner pod priority class %q, priority %v; want system-cluster-critical's 2000000000", pod.Spec.PriorityClassName, pod.Spec.Priority)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "registry" {
		t.Errorf("runner pod image pull secrets %v, want the release's imagePullSecrets", pod.Spec.ImagePullSecrets)
	}
	if pod.Labels["example.com/team"] != "platform" || pod.Annotations["example.com/cost-center"] != "42" || pod.Labels["karpenter.sh/nodeclaim"] != claim {
		t.Errorf("runner pod labels %v, annotations %v", pod.Labels, pod.Annotations)
	}
	c := pod.Spec.Containers[0]
	if !hasEnv(c.Env, "FULFILLER_TOFU_ENV_EXAMPLE_SETTING", "on") {
		t.Errorf("runner container env %v, want EXAMPLE_SETTING for tofu", c.Env)
	}
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "ca" && v.ConfigMap != nil && v.ConfigMap.Name == "ca-bundle"
	}) ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "ca" && m.MountPath == "/etc/ssl/extra" && m.ReadOnly
		}) {
		t.Errorf("runner pod volumes %+v, mounts %+v", pod.Spec.Volumes, c.VolumeMounts)
	}
}

// crdUpgradeAddsAField upgrades the CRD chart to a copy whose TofuNodeClass CRD has one more
// field: before the upgrade the API server prunes the field from a class, afterwards it
// keeps it.
func crdUpgradeAddsAField(ctx context.Context, t *testing.T, ext apiextensionsclient.Interface) {
	// The copy: the chart's files, the CRD with spec.addedField, a version one patch higher.
	copyDir := filepath.Join(t.TempDir(), "fulfiller-crd")
	if err := os.CopyFS(copyDir, os.DirFS(crdChart)); err != nil {
		t.Fatal(err)
	}
	rendered, err := helmCmd(t, "template", "fulfiller-crd", crdChart, "--show-only", "templates/fulfiller.sh_tofunodeclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal([]byte(rendered), crd); err != nil {
		t.Fatal(err)
	}
	for i := range crd.Spec.Versions {
		props := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties
		spec := props["spec"]
		spec.Properties["addedField"] = apiextensionsv1.JSONSchemaProps{Type: "string", Description: "a field of the next release"}
		props["spec"] = spec
	}
	data, err := yaml.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(copyDir, "templates", "fulfiller.sh_tofunodeclasses.yaml"), string(data))
	chartYAML := filepath.Join(copyDir, "Chart.yaml")
	meta, err := os.ReadFile(chartYAML)
	if err != nil {
		t.Fatal(err)
	}
	version := chartVersion(t, crdChart)
	writeFile(t, chartYAML, strings.Replace(string(meta), "version: "+version, "version: "+version+"-next", 1))

	classes := dynamic.NewForConfigOrDie(cp.Config).Resource(tofuNodeClassesGVR)
	createWithField := func(name string) string {
		t.Helper()
		nc := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "fulfiller.sh/v1alpha1", "kind": "TofuNodeClass", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"addedField": "kept", "module": map[string]any{"source": "/modules/sim"},
				"bootstrap": map[string]any{"apiServerEndpoint": "127.0.0.1:6443"},
				"nodeTypes": []any{map[string]any{"name": "small", "capacity": map[string]any{"cpu": "2", "memory": "4Gi"},
					"offerings": []any{map[string]any{"zone": "a", "price": "0.01"}}}}},
		}}
		got, err := classes.Create(ctx, nc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = classes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		v, _, _ := unstructured.NestedString(got.Object, "spec", "addedField")
		return v
	}
	if v := createWithField("before-the-field"); v != "" {
		t.Fatalf("the API server kept spec.addedField before the CRD had it: %q", v)
	}
	if out, err := helmCmd(t, "upgrade", "fulfiller-crd", copyDir, "--kubeconfig", cp.Kubeconfig, "--namespace", releaseNS); err != nil {
		t.Fatalf("upgrading the CRD chart: %v\n%s", err, out)
	}
	// The API server serves the new schema once the CRD is established again.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "tofunodeclasses.fulfiller.sh", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_, has := got.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["addedField"]
		return has && slices.ContainsFunc(got.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
			return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
		}), nil
	}); err != nil {
		t.Fatalf("the upgraded CRD: %v", err)
	}
	// The API server's handler of the CRD takes up the new schema shortly after it is stored.
	var v string
	tries := 0
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tries++
		v = createWithField(fmt.Sprintf("after-the-field-%d", tries))
		return v == "kept", nil
	}); err != nil {
		t.Fatalf("after the CRD chart's upgrade the API server prunes spec.addedField: %q", v)
	}
}

// allFeatureGates writes a values file that turns on every feature gate values.yaml has, by
// chart 0.1.0's names (each with its first letter upper-case) when old is set.
func allFeatureGates(t *testing.T, old bool) string {
	t.Helper()
	var values struct {
		Settings struct {
			FeatureGates map[string]bool `json:"featureGates"`
		} `json:"settings"`
	}
	readYAML(t, filepath.Join(chart, "values.yaml"), &values)
	if len(values.Settings.FeatureGates) == 0 {
		t.Fatal("values.yaml has no feature gates")
	}
	var b strings.Builder
	b.WriteString("settings:\n  featureGates:\n")
	for gate := range values.Settings.FeatureGates {
		if old {
			gate = strings.ToUpper(gate[:1]) + gate[1:]
		}
		fmt.Fprintf(&b, "    %s: true\n", gate)
	}
	path := filepath.Join(t.TempDir(), "all-feature-gates.yaml")
	writeFile(t, path, b.String())
	return path
}

// access is one question to the authorizer.
type access struct {
	verb, group, resource, namespace, name string
	allowed                                bool
}

type user struct {
	name   string
	groups []string
}

func serviceAccountUser(name string) user {
	return user{
		name:   "system:serviceaccount:" + releaseNS + ":" + name,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
	}
}

func (a access) check(ctx context.Context, t *testing.T, cs kubernetes.Interface, u user) {
	t.Helper()
	resource, sub, _ := strings.Cut(a.resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.name, Groups: u.groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: resource, Subresource: sub, Namespace: a.namespace, Name: a.name,
		},
	}}
	got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("asking the authorizer: %v", err)
	}
	if got.Status.Allowed != a.allowed {
		where := a.namespace
		if where == "" {
			where = "(cluster)"
		}
		t.Errorf("%s: %s %s/%s %q in %s: allowed=%v, want %v (%s)", u.name, a.verb, a.group, a.resource, a.name, where,
			got.Status.Allowed, a.allowed, got.Status.Reason)
	}
}

// runTofuAsRunner applies and destroys a module whose state is in the kubernetes backend,
// with the credentials of the runner ServiceAccount (a token from the TokenRequest API), as a
// runner Job would. It also checks for real that the token cannot read kube-system's Secrets.
func runTofuAsRunner(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	dir := t.TempDir()
	kubeconfig := serviceAccountKubeconfig(ctx, t, cs, "fulfiller-runner", dir)
	runnerConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	asRunner := kubernetes.NewForConfigOrDie(runnerConfig)
	for _, ns := range []string{"kube-system", releaseNS} {
		if _, err := asRunner.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the runner token listed %s's Secrets: %v", ns, err)
		}
	}
	if _, err := asRunner.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the runner token listed pods: %v", err)
	}

	module := filepath.Join(dir, "module")
	if err := os.MkdirAll(module, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(module, "main.tf"), `
terraform {
  backend "kubernetes" {}
}
resource "terraform_data" "machine" {
  input = "runner-rbac"
}
output "provider_id" {
  value = "test://${terraform_data.machine.id}"
}
`)
	home := filepath.Join(dir, "home")
	tofuRun := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, tofu, args...)
		cmd.Dir = module
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1",
			"TF_CLI_CONFIG_FILE=" + filepath.Join(dir, "empty.tfrc"), "KUBE_CONFIG_PATH=" + kubeconfig}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("tofu %s as the runner: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	writeFile(t, filepath.Join(dir, "empty.tfrc"), "")
	tofuRun("init", "-input=false", "-backend-config=secret_suffix=chart-test", "-backend-config=namespace="+stateNS)
	tofuRun("apply", "-input=false", "-auto-approve")
	state, err := cs.CoreV1().Secrets(stateNS).Get(ctx, "tfstate-default-chart-test", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the runner's apply wrote no state Secret: %v", err)
	}
	if len(state.Data["tfstate"]) == 0 {
		t.Error("the state Secret is empty")
	}
	if _, err := cs.CoordinationV1().Leases(stateNS).Get(ctx, "lock-tfstate-default-chart-test", metav1.GetOptions{}); err != nil {
		t.Errorf("the runner's apply took no lock Lease: %v", err)
	}
	tofuRun("destroy", "-input=false", "-auto-approve")
	tofuRun("workspace", "list") // lists state Secrets
}

// crdUIDs are the UIDs of the fulfiller's and Karpenter's CRDs.
func crdUIDs(ctx context.Context, t *testing.T, ext apiextensionsclient.Interface) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for _, name := range append(slices.Clone(karpenterCRDNames), fulfillerCRDNames...) {
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[name] = string(crd.UID)
	}
	return uids
}

func waitEstablished(ctx context.Context, t *testing.T, ext apiextensionsclient.Interface, name string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s installed by the chart is not established: %v", name, err)
	}
}

func readPassphrase(ctx context.Context, t *testing.T, cs kubernetes.Interface) []byte {
	t.Helper()
	s, err := cs.CoreV1().Secrets(releaseNS).Get(ctx, "fulfiller-state-encryption", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the passphrase Secret: %v", err)
	}
	p := s.Data["passphrase"]
	if len(p) < 16 {
		t.Fatalf("passphrase of %d bytes; OpenTofu's pbkdf2 key provider wants at least 16", len(p))
	}
	return p
}

func hasEnv(env []corev1.EnvVar, name, value string) bool {
	for _, e := range env {
		if e.Name == name {
			return e.Value == value
		}
	}
	return false
}

func ptrTo[T any](v T) *T { return &v }

// controllerWritesOnlyItsFinalizer changes a TofuNodeClass as the controller's ServiceAccount
// (impersonated): the chart's ValidatingAdmissionPolicy lets it add and remove its finalizer
// fulfiller.sh/claims, and refuses a change of the spec, a label or another finalizer.
func controllerWritesOnlyItsFinalizer(ctx context.Context, t *testing.T) {
	admin, err := ctrlclient.New(cp.Config, ctrlclient.Options{Scheme: chartScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	asController := rest.CopyConfig(cp.Config)
	u := serviceAccountUser("fulfiller")
	asController.Impersonate = rest.ImpersonationConfig{UserName: u.name, Groups: u.groups}
	controller, err := ctrlclient.New(asController, ctrlclient.Options{Scheme: chartScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	nc := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "admission-policy"},
		Spec: v1alpha1.TofuNodeClassSpec{
			Module:    v1alpha1.ModuleSource{Source: "/modules/sim"},
			Bootstrap: v1alpha1.BootstrapSpec{APIServerEndpoint: "127.0.0.1:6443"},
			NodeTypes: []v1alpha1.NodeType{{Name: "small",
				Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
				Offerings: []v1alpha1.Offering{{Zone: "a", Price: "0.01"}}}},
		},
	}
	if err := admin.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		got := &v1alpha1.TofuNodeClass{}
		if admin.Get(context.Background(), ctrlclient.ObjectKeyFromObject(nc), got) == nil {
			got.Finalizers = nil
			_ = admin.Update(context.Background(), got)
			_ = admin.Delete(context.Background(), got)
		}
	})
	change := func(c ctrlclient.Client, mutate func(*v1alpha1.TofuNodeClass)) error {
		got := &v1alpha1.TofuNodeClass{}
		if err := c.Get(ctx, ctrlclient.ObjectKeyFromObject(nc), got); err != nil {
			t.Fatal(err)
		}
		before := got.DeepCopy()
		mutate(got)
		return c.Patch(ctx, got, ctrlclient.MergeFrom(before))
	}
	const denied = "ValidatingAdmissionPolicy"
	// The policy is in force once the API server has read it: wait for the first refusal.
	// Each try is a new change: a change made before the policy was read would make the same
	// change again a no-op, which the policy allows.
	var err2 error
	tries := 0
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		tries++
		err2 = change(controller, func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Module.Version = fmt.Sprintf("changed-%d", tries) })
		return err2 != nil, nil
	}); err != nil {
		t.Fatalf("the controller changed a class's spec: %v", err2)
	}
	if !strings.Contains(err2.Error(), denied) || !strings.Contains(err2.Error(), "never changes a TofuNodeClass's spec") {
		t.Errorf("spec change refused with %v", err2)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.TofuNodeClass)
		want   string // in the refusal; empty: allowed
	}{
		{"add its finalizer", func(nc *v1alpha1.TofuNodeClass) { nc.Finalizers = append(nc.Finalizers, "fulfiller.sh/claims") }, ""},
		{"change a variable", func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Variables = map[string]string{"image": "other"} }, "never changes a TofuNodeClass's spec"},
		{"add a label", func(nc *v1alpha1.TofuNodeClass) { nc.Labels = map[string]string{"team": "x"} }, "changes only a TofuNodeClass's finalizer"},
		{"add another finalizer", func(nc *v1alpha1.TofuNodeClass) { nc.Finalizers = append(nc.Finalizers, "example.com/keep") }, "no finalizer"},
		{"remove its finalizer", func(nc *v1alpha1.TofuNodeClass) { nc.Finalizers = nil }, ""},
	} {
		err := change(controller, tc.mutate)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("as the controller, %s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Anyone else may change the spec.
	if err := change(admin, func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Module.Version = "2" }); err != nil {
		t.Errorf("an administrator changing the spec: %v", err)
	}
}

// chartScheme has the fulfiller's API, for typed clients.
func chartScheme(t *testing.T) *k8sruntime.Scheme {
	t.Helper()
	scheme := k8sruntime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}
