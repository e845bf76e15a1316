// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package controlplane starts a real Kubernetes control plane on loopback from the pinned
// binaries that hack/tools.sh builds: etcd, kube-apiserver (client certificates, bootstrap
// tokens, Node+RBAC authorization, NodeRestriction), kube-controller-manager (CSR approval and
// signing, bootstrap signer, token cleaner) and kube-scheduler, made what `kubeadm init` makes
// for joining nodes by kubeadm's own init phases (kubeadm.go), with the CRDs of Karpenter and
// the fulfiller. The local environment (`fulfiller-dev dev`) runs it; test suites reach it
// through internal/testenv, which adds the helpers that need package testing. It does not
// import testing itself.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fulfiller-sh/fulfiller/internal/proc"
)

// Options configure a control plane. The zero value is a usable default.
type Options struct {
	// Dir holds certificates, kubeconfigs, etcd data and process logs. When empty, a temporary
	// folder is used and removed by Stop.
	Dir string
	// CRDs are installed, and waited for, before Start returns.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// DisableBootstrapTokenAuth starts the API server without bootstrap-token authentication,
	// a cluster machines cannot join (for the join preflight's tests).
	DisableBootstrapTokenAuth bool
	// ReadyTimeout bounds the wait for every component (default 90s: starts slow down a lot
	// while another build shares the two cores).
	ReadyTimeout time.Duration
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// Dir holds everything the control plane wrote.
	Dir string
	// Server is the API server's URL, https://127.0.0.1:<port>.
	Server string
	// CAPEM is the cluster CA certificate (it also signs kubelet client certificates).
	CAPEM []byte
	// Config is a system:masters client configuration.
	Config *rest.Config
	// Kubeconfig is the path of an admin kubeconfig file for kubectl.
	Kubeconfig string

	pki      *pki
	procs    []*Process
	ownsDir  bool
	stopOnce bool
}

// Start runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler and returns once
// they serve, kubeadm's init phases for joins have run and the CRDs are established. On error every
// process it started is stopped.
func Start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	tools, err := LookTools("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubeadm")
	if err != nil {
		return nil, err
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 90 * time.Second
	}
	cp = &ControlPlane{Dir: opts.Dir}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "fulfiller-cp-"); err != nil {
			return nil, fmt.Errorf("creating control plane folder: %w", err)
		}
		cp.ownsDir = true
	}
	// A failed start stops what it started; its returns set cp to nil, so keep it here.
	started := cp
	defer func() {
		if err != nil {
			_ = started.Stop()
		}
	}()
	logs := filepath.Join(cp.Dir, "logs")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return nil, fmt.Errorf("creating log folder: %w", err)
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	cp.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if cp.pki, err = newPKI(filepath.Join(cp.Dir, "pki"), []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}); err != nil {
		return nil, err
	}
	cp.CAPEM = cp.pki.CA.CertPEM

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	if err := cp.start("etcd", tools["etcd"], logs,
		"--name=default", "--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return nil, err
	}

	p := cp.pki
	if err := cp.start("kube-apiserver", tools["kube-apiserver"], logs,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+p.APIServer.CertFile, "--tls-private-key-file="+p.APIServer.KeyFile,
		"--client-ca-file="+p.CA.CertFile,
		"--enable-bootstrap-token-auth="+strconv.FormatBool(!opts.DisableBootstrapTokenAuth),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.ServiceAccount.CertFile,
		"--service-account-signing-key-file="+p.ServiceAccount.KeyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--kubelet-client-certificate="+p.KubeletClient.CertFile, "--kubelet-client-key="+p.KubeletClient.KeyFile,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--allow-privileged=true", "--profiling=false",
	); err != nil {
		return nil, err
	}

	cp.Config = &rest.Config{
		Host:            cp.Server,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM, CertData: p.Admin.CertPEM, KeyData: p.Admin.KeyPEM},
		QPS:             200, Burst: 400,
	}
	if cp.Kubeconfig, err = cp.writeKubeconfig("admin", p.Admin); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, fmt.Errorf("building client: %w", err)
	}
	readyCtx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	if err := cp.waitFor(readyCtx, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	}); err != nil {
		return nil, err
	}

	// The system namespaces appear a moment after /readyz; kubeadm writes into two of them.
	if err := cp.waitFor(readyCtx, "namespaces kube-system and kube-public", func(ctx context.Context) (bool, error) {
		for _, ns := range []string{metav1.NamespaceSystem, metav1.NamespacePublic} {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return nil, err
	}
	if err := cp.kubeadmInit(readyCtx, tools["kubeadm"], cs); err != nil {
		return nil, err
	}
	// The CRDs are served before kube-controller-manager starts: its garbage collector reads
	// the deletable resources at its start and then only every 30 s, and until it watches a
	// resource a foreground deletion of its objects (a VM's DataVolumes) does not wait for
	// their dependents, which it deletes later as orphans.
	if err := installCRDs(readyCtx, cp.Config, opts.CRDs); err != nil {
		return nil, err
	}
	kcm, err := cp.writeKubeconfig("controller-manager", p.ControllerMgr)
	if err != nil {
		return nil, err
	}
	if err := cp.start("kube-controller-manager", tools["kube-controller-manager"], logs,
		"--kubeconfig="+kcm, "--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		"--secure-port=0", "--leader-elect=false", "--cluster-name=fulfiller",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--cluster-signing-cert-file="+p.CA.CertFile, "--cluster-signing-key-file="+p.CA.KeyFile,
		"--root-ca-file="+p.CA.CertFile,
		"--service-account-private-key-file="+p.ServiceAccount.KeyFile,
		"--use-service-account-credentials=true",
	); err != nil {
		return nil, err
	}
	sched, err := cp.writeKubeconfig("scheduler", p.Scheduler)
	if err != nil {
		return nil, err
	}
	if err := cp.start("kube-scheduler", tools["kube-scheduler"], logs,
		"--kubeconfig="+sched, "--authentication-kubeconfig="+sched, "--authorization-kubeconfig="+sched,
		"--secure-port=0", "--leader-elect=false",
	); err != nil {
		return nil, err
	}

	// The service-account controller creating the default ServiceAccount shows that
	// kube-controller-manager is connected and running its controllers.
	if err := cp.waitFor(readyCtx, "kube-controller-manager", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	}); err != nil {
		return nil, err
	}
	return cp, nil
}

// Stop stops the components in the safe order (never etcd before the API server) and removes
// the folder when Start created it.
func (cp *ControlPlane) Stop() error {
	if cp.stopOnce {
		return nil
	}
	cp.stopOnce = true
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		if err := cp.procs[i].Stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if cp.ownsDir {
		if err := os.RemoveAll(cp.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", cp.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// writeKubeconfig writes a kubeconfig for a client certificate of this control plane.
func (cp *ControlPlane) writeKubeconfig(name string, kp *keyPair) (string, error) {
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"fulfiller": {Server: cp.Server, CertificateAuthorityData: cp.CAPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{"fulfiller": {Cluster: "fulfiller", AuthInfo: name}},
		CurrentContext: "fulfiller",
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, os.Chmod(path, 0o600)
}

func (cp *ControlPlane) start(name, binary, logs string, args ...string) error {
	p, err := StartProcess(name, binary, logs, nil, args...)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	return nil
}

// waitFor polls cond until it is true, failing early with the log tail of any component that
// exited.
func (cp *ControlPlane) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range cp.procs {
			if done, perr := p.Exited(); done {
				return false, fmt.Errorf("%s exited (%w) while waiting for %s; log tail:\n%s", p.name, proc.WaitError(perr), what, p.Tail(2000))
			}
		}
		return cond(ctx)
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// FreePorts reserves n distinct loopback ports and releases them for a process to bind.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
