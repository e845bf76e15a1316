// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kubelet is a stand-in kubelet for tests: it registers a Node, keeps its Lease and
// Ready condition fresh, runs the pods the scheduler binds to it as local child processes and
// serves their container logs on the node's kubelet endpoint, so that `kubectl logs` goes
// through the API server's ordinary log path. It is made for the fulfiller's runner pods
// (one container, Secret and emptyDir volumes, restartPolicy Never), not for anything else.
//
// A pod's container runs on this machine, not in a container, so what it sees differs from a
// real node in the ways Config documents: its command's first element is looked up in
// Config.Binaries, and paths under the container's volume mounts and its termination message
// path are rewritten to folders under Config.Dir wherever they occur in the command, the
// arguments and the environment values. File contents (a request file in a Secret) are
// not rewritten.
package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Config configures a stand-in kubelet.
type Config struct {
	// Client acts as the kubelet (an admin client will do: the stand-in does not go through
	// the Node authorizer).
	Client kubernetes.Interface
	// NodeName is the Node to register (default "runner-node").
	NodeName string
	// Labels and Taints go on the Node, e.g. to keep other pods off it.
	Labels map[string]string
	Taints []corev1.Taint
	// Capacity of the Node (default 8 CPUs, 16Gi memory, 110 pods).
	Capacity corev1.ResourceList
	// Dir holds a folder per pod: volumes, the termination message file and container logs.
	Dir string
	// Binaries maps a container command's first element (e.g. "fulfiller") to a local
	// executable. A command that is not in it runs as given.
	Binaries map[string]string
	// ImagePaths are local folders that stand in for the image's own files (e.g. the tools
	// and their CLI configuration, which the environment passes to containers by their local
	// paths): a path under one is left as it is, even where a pod mounts a volume over a
	// folder holding it (an emptyDir on /tmp, while the tools' cache lies under /tmp).
	ImagePaths []string
	// Env is added to every container's environment before the pod's own (e.g. what turns a
	// test binary into the runner). PATH is inherited from this process unless set here.
	Env []string
	// ImageUser and ImageGroup are the user and group the image runs as when a pod sets none
	// (the fulfiller image's are 65532): the container's files must be usable by them (see
	// identity.go). Zero is root.
	ImageUser, ImageGroup int64
	// ServingCertPEM and ServingKeyPEM are the log endpoint's certificate (the API server
	// does not verify it unless started with --kubelet-certificate-authority).
	ServingCertPEM, ServingKeyPEM []byte
	// ClientCAPEM verifies the API server's kubelet client certificate; requests without a
	// certificate it signed are refused.
	ClientCAPEM []byte
	// APIServer is the API server's host:port, given to containers as KUBERNETES_SERVICE_HOST
	// and KUBERNETES_SERVICE_PORT (a kubelet takes them from the kubernetes Service).
	APIServer string
	// HeartbeatInterval is how often the Lease is renewed (default 10s).
	HeartbeatInterval time.Duration
	// Logf receives the stand-in's own log lines (default: discarded).
	Logf func(format string, args ...any)
}

// Kubelet is a running stand-in kubelet.
type Kubelet struct {
	cfg    Config
	server *http.Server
	port   int
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	pods map[types.UID]*podWorker
	// logs maps namespace/name/container to the newest log file of that container.
	logs map[string]*containerLog
	wg   sync.WaitGroup
}

const leaseDuration = 40 * time.Second

// Start registers the Node, starts serving logs and starts running the pods bound to it. Stop
// (or cancelling ctx) stops it.
func Start(ctx context.Context, cfg Config) (*Kubelet, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubelet: no client")
	}
	if cfg.NodeName == "" {
		cfg.NodeName = "runner-node"
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.Capacity == nil {
		cfg.Capacity = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Dir == "" {
		return nil, errors.New("kubelet: no folder for pods")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("kubelet: creating %s: %w", cfg.Dir, err)
	}
	k := &Kubelet{cfg: cfg, done: make(chan struct{}), pods: map[types.UID]*podWorker{}, logs: map[string]*containerLog{}}
	if err := k.serve(); err != nil {
		return nil, err
	}
	ctx, k.cancel = context.WithCancel(ctx)
	node, err := k.register(ctx)
	if err != nil {
		k.cancel()
		_ = k.server.Close()
		return nil, err
	}
	k.wg.Add(2)
	go func() { defer k.wg.Done(); k.heartbeat(ctx, node) }()
	go func() { defer k.wg.Done(); k.watchPods(ctx) }()
	go func() { k.wg.Wait(); close(k.done) }()
	return k, nil
}

// NodeName is the registered Node's name.
func (k *Kubelet) NodeName() string { return k.cfg.NodeName }

// Port is the kubelet endpoint's port on 127.0.0.1.
func (k *Kubelet) Port() int { return k.port }

// Stop kills every container still running (SIGKILL, no grace: the node "crashes"), stops
// serving and waits for its goroutines. The Node object stays.
func (k *Kubelet) Stop() {
	k.cancel()
	<-k.done
	_ = k.server.Close()
}

func (k *Kubelet) serve() error {
	cert, err := tls.X509KeyPair(k.cfg.ServingCertPEM, k.cfg.ServingKeyPEM)
	if err != nil {
		return fmt.Errorf("kubelet: serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(k.cfg.ClientCAPEM) {
		return errors.New("kubelet: no client CA certificate")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("kubelet: listening: %w", err)
	}
	k.port = ln.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.serveLog)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	k.server = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			MinVersion:   tls.VersionTLS12,
		},
	}
	go func() { _ = k.server.ServeTLS(ln, "", "") }()
	return nil
}

// register creates the Node (or takes over one of the same name) and posts its status.
func (k *Kubelet) register(ctx context.Context) (*corev1.Node, error) {
	nodes := k.cfg.Client.CoreV1().Nodes()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Labels: map[string]string{
			corev1.LabelHostname: k.cfg.NodeName, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
		}},
		Spec: corev1.NodeSpec{Taints: k.cfg.Taints},
	}
	for key, v := range k.cfg.Labels {
		node.Labels[key] = v
	}
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("kubelet: registering Node %s: %w", k.cfg.NodeName, err)
	}
	return k.postStatus(ctx, created)
}

func (k *Kubelet) nodeStatus(current []corev1.NodeCondition) corev1.NodeStatus {
	now := metav1.Now()
	conditions := []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "stand-in kubelet is posting ready status"},
	}
	for i := range conditions {
		conditions[i].LastHeartbeatTime, conditions[i].LastTransitionTime = now, now
		for _, c := range current {
			if c.Type == conditions[i].Type && c.Status == conditions[i].Status && !c.LastTransitionTime.IsZero() {
				conditions[i].LastTransitionTime = c.LastTransitionTime
			}
		}
	}
	return corev1.NodeStatus{
		Capacity:        k.cfg.Capacity,
		Allocatable:     k.cfg.Capacity,
		Conditions:      conditions,
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: k.cfg.NodeName}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(k.port)}},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v1.36.0-standin",
			ContainerRuntimeVersion: "standin://local-processes",
		},
	}
}

func (k *Kubelet) postStatus(ctx context.Context, node *corev1.Node) (*corev1.Node, error) {
	patch, err := json.Marshal(map[string]any{"status": k.nodeStatus(node.Status.Conditions)})
	if err != nil {
		return nil, fmt.Errorf("kubelet: encoding status: %w", err)
	}
	updated, err := k.cfg.Client.CoreV1().Nodes().PatchStatus(ctx, node.Name, patch)
	if err != nil {
		return nil, fmt.Errorf("kubelet: posting Node status: %w", err)
	}
	return updated, nil
}

// heartbeat renews the Lease every interval and posts the status every fourth beat.
func (k *Kubelet) heartbeat(ctx context.Context, node *corev1.Node) {
	ticker := time.NewTicker(k.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for beat := 0; ; beat++ {
		if err := k.renewLease(ctx, node); err != nil && ctx.Err() == nil {
			k.cfg.Logf("kubelet: renewing Lease: %v", err)
		}
		if beat > 0 && beat%4 == 0 {
			if updated, err := k.postStatus(ctx, node); err == nil {
				node = updated
			} else if ctx.Err() == nil {
				k.cfg.Logf("%v", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (k *Kubelet) renewLease(ctx context.Context, node *corev1.Node) error {
	leases := k.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(max(leaseDuration, 4*k.cfg.HeartbeatInterval) / time.Second)
	name := k.cfg.NodeName
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &seconds, RenewTime: &now},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &name, &seconds, &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func logKey(namespace, pod, container string) string {
	return namespace + "/" + pod + "/" + container
}

func itoa(n int) string { return strconv.Itoa(n) }
