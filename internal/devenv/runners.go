// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package devenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/kubelet"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Executors of the environment.
const (
	ExecutorLocal = "local"
	ExecutorJob   = "job"
)

// Runner node and identity of the job executor.
const (
	RunnerServiceAccount = "fulfiller-runner"
	RunnerNodeName       = "runner-node"
	runnerNodeLabel      = "fulfiller.sh/runner"
	// RunnerImage names the image runner Jobs ask for; the stand-in kubelet runs this
	// binary instead.
	RunnerImage = "fulfiller:dev"
)

// runnerRBAC gives the runners' ServiceAccount what a tofu run with the kubernetes state
// backend needs, and nothing else: Secrets (states) and Leases (locks) in the state namespace.
func runnerRBAC(ctx context.Context, cs kubernetes.Interface) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: RunnerServiceAccount}}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: StateNamespace, Name: RunnerServiceAccount},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update", "delete"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: StateNamespace, Name: RunnerServiceAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: sa.Name}},
	}
	for _, create := range []func() error{
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(Namespace).Create(ctx, sa, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().Roles(StateNamespace).Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().RoleBindings(StateNamespace).Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating runner RBAC: %w", err)
		}
	}
	return nil
}

// startRunnerNode starts the stand-in kubelet that runs runner pods: it registers a tainted
// node only runners tolerate and runs their container command (this binary) locally, with
// the pod's service-account token, so that runs authenticate as the runner ServiceAccount.
func startRunnerNode(ctx context.Context, l Layout, cp *controlplane.ControlPlane, cs kubernetes.Interface, logf *os.File) (*kubelet.Kubelet, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cert, key, err := cp.IssueServingCert([]net.IP{net.ParseIP("127.0.0.1")}, []string{RunnerNodeName})
	if err != nil {
		return nil, err
	}
	var env []string
	if rc, err := controlplane.TofuRC(); err == nil {
		env = append(env, tofuRCEnv(rc)) // what the image's ENV sets
	}
	return kubelet.Start(ctx, kubelet.Config{
		Env:      env,
		Client:   cs,
		NodeName: RunnerNodeName,
		Labels:   map[string]string{runnerNodeLabel: "true"},
		Taints:   []corev1.Taint{{Key: runnerNodeLabel, Effect: corev1.TaintEffectNoSchedule}},
		Dir:      l.Kubelet(),
		Binaries: map[string]string{"fulfiller": self},
		// The tools stand for the image's tofu, mirror and CLI configuration, by their local
		// paths: the runner's emptyDir on /tmp must not cover them when the cache lies there.
		ImagePaths: []string{filepath.Dir(controlplane.ToolsBin())},
		// The image's user (hack/image: user 65532:65532): runner pods must work as it.
		ImageUser: 65532, ImageGroup: 65532,
		APIServer:      strings.TrimPrefix(cp.Server, "https://"),
		ServingCertPEM: cert, ServingKeyPEM: key,
		ClientCAPEM: cp.CAPEM,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(logf, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
		},
	})
}

// tofuRCEnv is the runner's variable that gives tofu the CLI configuration rc (the image
// sets it to its own).
func tofuRCEnv(rc string) string {
	return tfrunner.TofuEnvPrefix + "TF_CLI_CONFIG_FILE=" + rc
}

// jobExecutorEnv is the controller's environment for the job executor.
func jobExecutorEnv(tofu string) []string {
	return []string{
		"FULFILLER_EXECUTOR=" + ExecutorJob,
		"FULFILLER_RUNNER_IMAGE=" + RunnerImage,
		"FULFILLER_RUNNER_SERVICE_ACCOUNT=" + RunnerServiceAccount,
		"FULFILLER_RUNNER_NODE_SELECTOR=" + `{"` + runnerNodeLabel + `":"true"}`,
		"FULFILLER_RUNNER_TOLERATIONS=" + `[{"key":"` + runnerNodeLabel + `","operator":"Exists","effect":"NoSchedule"}]`,
		"FULFILLER_RUNNER_TTL=10m",
		"FULFILLER_TOFU=" + tofu,
	}
}
