// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

// Defaults of a MachineConfig.
const (
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultDiscoveryTimeout is kubeadm's default timeouts.discovery.
	DefaultDiscoveryTimeout = 5 * time.Minute
	// DefaultPods is the kubelet's default maxPods.
	DefaultPods = 110
	// tlsBootstrapTimeout is kubeadm's default timeouts.tlsBootstrap.
	tlsBootstrapTimeout = 5 * time.Minute
	// statusEvery is how many heartbeats pass between two refreshes of the Node's status.
	statusEvery = 4
)

// MachineConfig describes one simulated machine: what its module asked the "cloud" for.
type MachineConfig struct {
	// Name identifies the machine (its hostname, and the node name when the JoinConfiguration
	// does not set one).
	Name string `json:"name"`
	// UserDataPath is the file holding the cloud-init user data the module received.
	UserDataPath string `json:"userDataPath"`
	// Capacity is what the Node reports as capacity and allocatable; pods defaults to 110.
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// BootDelay is how long the machine takes from power-on to running cloud-init.
	BootDelay time.Duration `json:"bootDelay,omitempty"`
	// NeverJoin models a machine that boots but never joins (broken image, no route to the
	// API server): it idles until powered off.
	NeverJoin bool `json:"neverJoin,omitempty"`
	// HeartbeatInterval is how often the kubelet renews its Lease (default 10s); the Node's
	// status is refreshed every fourth heartbeat.
	HeartbeatInterval time.Duration `json:"heartbeatInterval,omitempty"`
	// DiscoveryTimeout bounds token discovery (kubeadm's timeouts.discovery, default 5m).
	DiscoveryTimeout time.Duration `json:"discoveryTimeout,omitempty"`
	// StateDir is the machine's disk: the kubelet keeps its client certificate there, so a
	// restarted machine comes back as the same node without its (by then revoked) token.
	// Optional for RunMachine; required by Start.
	StateDir string `json:"stateDir,omitempty"`
	// Addresses the Node reports; by default InternalIP 127.0.0.1 and its Hostname.
	Addresses []corev1.NodeAddress `json:"addresses,omitempty"`
	// CNIDelay models a slow network plugin: from registration until it passes, the Node is
	// Ready=False and NetworkUnavailable=True. CNINever: the plugin never comes up.
	CNIDelay time.Duration `json:"cniDelay,omitempty"`
	CNINever bool          `json:"cniNever,omitempty"`
	// GPUDelay models a slow device plugin: from registration until it passes, the GPU
	// resource (the capacity's extended resources) is allocatable 0. GPUNever: the plugin
	// never registers.
	GPUDelay time.Duration `json:"gpuDelay,omitempty"`
	GPUNever bool          `json:"gpuNever,omitempty"`
	// MetadataURL is what http://169.254.169.254 is on the machine's network: its cloud's
	// metadata service (e.g. http://127.0.0.1:PORT/metadata/<server-id> of the hcloud
	// stand-in), as the network routes the link-local address to it. Empty: the machine has
	// no metadata service.
	MetadataURL string `json:"metadataURL,omitempty"`
	// Image the machine boots from: ImageNode (the default) has the node software,
	// ImageStock has none (packages.go).
	Image string `json:"image,omitempty"`
	// Arch is the machine's architecture, amd64 (the default) or arm64.
	Arch string `json:"arch,omitempty"`
	// OS is the image's operating system: ubuntu-24.04 (the default), ubuntu-22.04,
	// debian-12, or debian-13 and rocky-9 (which the install script does not support).
	OS string `json:"os,omitempty"`
	// PackageDelay is how long each package operation takes: an apt-get update or install,
	// a download.
	PackageDelay time.Duration `json:"packageDelay,omitempty"`
	// PackageFault, when set, makes the commands it names fail.
	PackageFault *PackageFault `json:"packageFault,omitempty"`
}

func (c MachineConfig) arch() string {
	if c.Arch == "" {
		return "amd64"
	}
	return c.Arch
}

func (c MachineConfig) withDefaults() MachineConfig {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.DiscoveryTimeout <= 0 {
		c.DiscoveryTimeout = DefaultDiscoveryTimeout
	}
	return c
}

func (c MachineConfig) validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("machine name is empty"))
	}
	if c.UserDataPath == "" {
		errs = append(errs, errors.New("user data path is empty"))
	}
	if c.BootDelay < 0 {
		errs = append(errs, fmt.Errorf("boot delay %s is negative", c.BootDelay))
	}
	if c.CNIDelay < 0 || c.GPUDelay < 0 || c.PackageDelay < 0 {
		errs = append(errs, fmt.Errorf("cni delay %s, gpu delay %s and package delay %s may not be negative", c.CNIDelay, c.GPUDelay, c.PackageDelay))
	}
	if c.Image != "" && c.Image != ImageNode && c.Image != ImageStock {
		errs = append(errs, fmt.Errorf("image %q is neither %s nor %s", c.Image, ImageNode, ImageStock))
	}
	if _, ok := osReleases[c.OS]; c.OS != "" && !ok {
		errs = append(errs, fmt.Errorf("operating system %q is unknown", c.OS))
	}
	if c.Arch != "" && c.Arch != "amd64" && c.Arch != "arm64" {
		errs = append(errs, fmt.Errorf("architecture %q is neither amd64 nor arm64", c.Arch))
	}
	if f := c.PackageFault; f != nil && (len(strings.Fields(f.Command)) == 0 || f.Times < 0) {
		errs = append(errs, fmt.Errorf("package fault %+v needs a command and times >= 0", *f))
	}
	return errors.Join(errs...)
}

// RunMachine runs one simulated machine from power-on until ctx ends (power-off): it boots,
// reads the user data its module received, joins the cluster the kubeadm way (token
// discovery, TLS bootstrap), registers its Node as system:node:<name> and keeps it alive like
// a kubelet. It returns nil when ctx ends, whatever the stage, and an error when the join
// fails. Like a powered-off server it never deletes its Node. Progress goes to log; the token
// never does.
func RunMachine(ctx context.Context, cfg MachineConfig, log io.Writer) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("invalid machine config: %w", err)
	}
	m := &machine{cfg: cfg, log: newProgress(log, cfg.Name)}
	err := m.run(ctx)
	if ctx.Err() != nil {
		m.log.printf("powered off")
		return nil
	}
	if err != nil {
		m.log.printf("failed: %v", err)
	}
	return err
}

type machine struct {
	cfg MachineConfig
	log *progress
	// join is the JoinConfiguration kubeadm joined with (or, after a restart, what kubeadm
	// left for the kubelet); nil until then.
	join *bootstrap.JoinConfiguration
	// nodeName is nodeRegistration.name, or the hostname.
	nodeName string
	// kubelet is the kubelet's client configuration once kubeadm join has succeeded;
	// joinErr why it failed.
	kubelet *rest.Config
	joinErr error
	// allocatableBase is capacity less what the kubelet's flags reserve.
	allocatableBase corev1.ResourceList
	client          kubernetes.Interface
	bootID          string
	// registered is when the kubelet registered the Node (this boot); the simulated CNI and
	// device plugin delays count from it.
	registered time.Time
	// faults counts the commands PackageFault named; packageOps the package operations.
	faultsMu   sync.Mutex
	faults     int
	packageOps int
	// injected holds the node conditions of ConditionsFile.
	injected injected
}

// run is the machine's life, one stage after the other.
func (m *machine) run(ctx context.Context) error {
	m.log.printf("powered on, booting (%s)", m.cfg.BootDelay)
	if !sleep(ctx, m.cfg.BootDelay) {
		return ctx.Err()
	}
	if err := m.boot(ctx); err != nil {
		return err
	}
	if m.kubelet == nil {
		// Powered off while idling (NeverJoin).
		return ctx.Err()
	}
	var err error
	if m.allocatableBase, err = nodeAllocatable(m.capacity(), m.join.NodeRegistration); err != nil {
		return err
	}
	cfg := rest.CopyConfig(m.kubelet)
	cfg.UserAgent = "kubelet/" + KubeletVersion + " (linux/amd64) fulfiller-sim"
	if m.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("building node client: %w", err)
	}
	node, err := m.register(ctx)
	if err != nil {
		return err
	}
	pods := newPodLoop(m)
	done := make(chan struct{})
	go func() { defer close(done); pods.run(ctx) }()
	defer func() { <-done }()
	return m.heartbeat(ctx, node)
}

// boot is what happens between power-on and a running kubelet. A machine that joined before
// (its kubelet's credentials and kubeadm's flags on its disk) starts its kubelet again;
// cloud-init runs its runcmd once per instance. Otherwise cloud-init runs: write_files, then
// runcmd, whose `kubeadm join` joins the cluster (kubeadmJoin).
func (m *machine) boot(ctx context.Context) error {
	if resumed, err := m.resume(); err != nil {
		m.log.printf("not starting the kubelet from disk: %v", err)
	} else if resumed {
		m.log.printf("kubelet found its client certificate on disk, not joining again")
		return nil
	}
	data, err := os.ReadFile(m.cfg.UserDataPath)
	if err != nil {
		return fmt.Errorf("reading user data: %w", err)
	}
	cc, err := parseCloudConfig(data)
	if err != nil {
		return fmt.Errorf("reading user data %s: %w", m.cfg.UserDataPath, err)
	}
	root, cleanup, err := m.diskRoot()
	if err != nil {
		return err
	}
	defer cleanup()
	d, err := newDisk(root)
	if err != nil {
		return err
	}
	if err := d.installImage(m.cfg.Image, m.cfg.OS); err != nil {
		return fmt.Errorf("writing the image onto the disk: %w", err)
	}
	if err := d.writeFiles(cc.WriteFiles); err != nil {
		return fmt.Errorf("cloud-init: %w", err)
	}
	m.log.printf("cloud-init wrote %d files", len(cc.WriteFiles))
	if m.cfg.NeverJoin {
		m.log.printf("cloud-init ran, but this machine never joins: idling until powered off")
		<-ctx.Done()
		return nil
	}
	script, err := runcmdScript(cc.RunCmd)
	if err != nil {
		return fmt.Errorf("cloud-init: %w", err)
	}
	out := &lineLog{p: m.log, prefix: "cloud-init: "}
	sh := &shell{m: m, disk: d}
	err = sh.run(ctx, script, runcmdPath, nil, out, out, nil, nil)
	out.flush()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case m.kubelet != nil:
		return nil
	case m.joinErr != nil:
		return fmt.Errorf("kubeadm join: %w", m.joinErr)
	case err != nil || len(sh.failed) > 0:
		msg := "cloud-init ran, but kubeadm join never ran"
		if err != nil {
			msg += fmt.Sprintf(" (runcmd: %v)", err)
		}
		if len(sh.failed) > 0 {
			msg += "; failed commands: " + strings.Join(sh.failed, "; ")
		}
		return errors.New(msg)
	}
	return errors.New("cloud-init ran, but its runcmd never ran kubeadm join")
}

// diskRoot is the folder of the machine's disk: in its state dir, or a temporary one.
func (m *machine) diskRoot() (string, func(), error) {
	if m.cfg.StateDir != "" {
		root := filepath.Join(m.cfg.StateDir, "rootfs")
		return root, func() {}, os.MkdirAll(root, 0o700)
	}
	root, err := os.MkdirTemp("", "sim-rootfs-")
	if err != nil {
		return "", nil, fmt.Errorf("creating the machine's disk: %w", err)
	}
	return root, func() { os.RemoveAll(root) }, nil
}

// kubeadmJoin is `kubeadm join --config path` on the machine: it reads the
// JoinConfiguration, discovers the cluster with the bootstrap token, TLS bootstraps the
// kubelet's credentials and keeps them and the kubelet's flags on disk.
func (m *machine) kubeadmJoin(ctx context.Context, path string) (err error) {
	defer func() { m.joinErr = err }()
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the JoinConfiguration: %w", unwrapPath(err))
	}
	var join bootstrap.JoinConfiguration
	if err := yaml.UnmarshalStrict(data, &join); err != nil {
		return fmt.Errorf("parsing the JoinConfiguration: %w", err)
	}
	if join.APIVersion != bootstrap.JoinAPIVersion || join.Kind != bootstrap.JoinKind {
		return fmt.Errorf("the configuration is %s %s, want %s %s", join.APIVersion, join.Kind, bootstrap.JoinAPIVersion, bootstrap.JoinKind)
	}
	if join.Discovery.BootstrapToken == nil {
		return errors.New("the JoinConfiguration has no bootstrap token discovery")
	}
	m.join = &join
	m.nodeName = join.NodeRegistration.Name
	if m.nodeName == "" {
		m.nodeName = m.cfg.Name
	}
	bt := join.Discovery.BootstrapToken
	tok, err := bootstrap.ParseToken(bt.Token)
	if err != nil {
		return errors.New("the discovery token in the JoinConfiguration is malformed")
	}
	m.log.printf("kubeadm join: discovering the cluster at %s with token %s", bt.APIServerEndpoint, tok.ID)
	discoverCtx, cancel := context.WithTimeout(ctx, m.cfg.DiscoveryTimeout)
	defer cancel()
	server, caPEM, err := discover(discoverCtx, bt.APIServerEndpoint, tok, bt.CACertHashes, m.log)
	if err != nil {
		return err
	}
	m.log.printf("kubeadm join: cluster CA verified against the pinned hash; TLS bootstrap as system:node:%s", m.nodeName)
	tlsToken := tok.String()
	if t := join.Discovery.TLSBootstrapToken; t != "" {
		tlsToken = t
	}
	bootstrapCtx, cancel := context.WithTimeout(ctx, tlsBootstrapTimeout)
	defer cancel()
	creds, err := TLSBootstrap(bootstrapCtx, TokenConfig(server, caPEM, tlsToken), m.nodeName)
	if err != nil {
		return fmt.Errorf("TLS bootstrap: %w", err)
	}
	m.log.printf("kubeadm join: client certificate for system:node:%s signed", m.nodeName)
	if err := m.saveKubeconfig(server, caPEM, creds); err != nil {
		return err
	}
	if err := m.saveKubeletFlags(join.NodeRegistration); err != nil {
		return err
	}
	m.kubelet = NodeConfig(server, caPEM, creds)
	return nil
}

// lineLog writes a script's output to the machine's log, line by line.
type lineLog struct {
	p      *progress
	prefix string
	buf    []byte
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		l.p.printf("%s%s", l.prefix, l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

func (l *lineLog) flush() {
	if len(l.buf) > 0 {
		l.p.printf("%s%s", l.prefix, l.buf)
		l.buf = nil
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// progress writes timestamped progress lines of one machine.
type progress struct {
	w    io.Writer
	name string
}

func newProgress(w io.Writer, name string) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{w: w, name: name}
}

func (p *progress) printf(format string, args ...any) {
	fmt.Fprintf(p.w, "%s machine %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.name, fmt.Sprintf(format, args...))
}
