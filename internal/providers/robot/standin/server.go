// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"

	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/sim"
)

// Timings are how long a simulated server takes. Real servers take minutes (a reboot about
// two, installimage ten to twenty); tests use seconds. Scale divides them all.
type Timings struct {
	// Boot is from a reset until the rescue or installed system answers SSH.
	Boot time.Duration
	// Install is how long installimage runs.
	Install time.Duration
	// Shutdown is how long a `reboot` takes to go down: the system keeps answering SSH
	// meanwhile, as sshd does until systemd stops it.
	Shutdown time.Duration
	// HeartbeatInterval of the simulated kubelet (default sim's).
	HeartbeatInterval time.Duration
}

// RealTimings are what a real server takes, roughly.
var RealTimings = Timings{Boot: 2 * time.Minute, Install: 20 * time.Minute, Shutdown: 20 * time.Second}

// Scale returns the timings divided by factor (600: a 20-minute install takes 2 seconds).
func (t Timings) Scale(factor float64) Timings {
	div := func(d time.Duration) time.Duration { return time.Duration(float64(d) / factor) }
	return Timings{Boot: div(t.Boot), Install: div(t.Install), Shutdown: div(t.Shutdown), HeartbeatInterval: t.HeartbeatInterval}
}

// ServerConfig describes one simulated dedicated server.
type ServerConfig struct {
	Number           int
	Name, Product    string
	DC               string
	Timings          Timings
	Images           []string // installimage images that exist
	Capacity         corev1.ResourceList
	StateDir         string // the disk: the simulated kubelet's files
	NoReset          bool   // the server has no reset option
	NoRescue         bool   // the server has no rescue boot option
	MachineLog       io.Writer
	ConnectTimeout   time.Duration
	InstalledAddress string // InternalIP its Node reports (default 127.0.0.1)
}

// system is what a server runs.
type system int

const (
	systemNone      system = iota // booting, or nothing bootable
	systemRescue                  // the rescue system
	systemInstalled               // the installed OS
)

// disk is the installed system.
type disk struct {
	hostKey    ssh.Signer
	authorized []ssh.PublicKey
	userData   []byte
	state      string
	hostname   string
}

// Server is a simulated dedicated server with an SSH endpoint on a loopback port.
type Server struct {
	cfg       ServerConfig
	ln        net.Listener
	keyLookup func(fp string) (robot.Key, bool)

	mu          sync.Mutex
	gen         int // bumped by every power cycle: stale boots and installs stop
	system      system
	rescueOS    string
	rescueArmed []robot.Key
	rescueLast  []robot.Key
	rescueKey   ssh.Signer
	rescueFiles map[string][]byte
	disk        *disk
	installing  bool
	failInstall int
	stopMachine context.CancelFunc
	machineDone chan struct{}
	events      []string
	closed      bool
	held        chan struct{} // while set, boots wait until it is closed
	stopped     chan struct{} // closed by Close
}

// NewServer starts a powered-off server with an empty disk and its SSH listener.
func NewServer(cfg ServerConfig) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("robot stand-in server %d: %w", cfg.Number, err)
	}
	if cfg.InstalledAddress == "" {
		cfg.InstalledAddress = "127.0.0.1"
	}
	s := &Server{cfg: cfg, ln: ln, stopped: make(chan struct{})}
	go s.accept()
	return s, nil
}

// SSHPort is the port of the server's SSH endpoint.
func (s *Server) SSHPort() int { return s.ln.Addr().(*net.TCPAddr).Port }

// IP is the server's main IP.
func (s *Server) IP() string { return "127.0.0.1" }

// Number is the server number.
func (s *Server) Number() int { return s.cfg.Number }

// InstallStandby puts a standby system on the disk (the OS and kubelet, no join) that lets
// authorized in, as the pool keeper's install leaves a server, and boots it. It returns the
// host key to record.
func (s *Server) InstallStandby(authorized ssh.PublicKey) (ssh.PublicKey, error) {
	key, err := newSigner()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.disk = &disk{hostKey: key, authorized: []ssh.PublicKey{authorized}, state: robot.StateStandby, hostname: fmt.Sprintf("robot-%d", s.cfg.Number)}
	s.mu.Unlock()
	s.Reset()
	return key.PublicKey(), nil
}

// ReplaceHostKey gives the installed system a new host key, as a reinstall behind the
// pool's back (or another machine at its address) would.
func (s *Server) ReplaceHostKey() error {
	key, err := newSigner()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disk != nil {
		s.disk.hostKey = key
	}
	return nil
}

// UseOutsidePool marks the installed system active, as if someone had joined it by hand.
func (s *Server) UseOutsidePool() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disk != nil {
		s.disk.state = robot.StateActive
	}
}

// Rename gives the server another name, as its owner does in Robot (the webservice's
// POST /server/{server-number} server_name): taken out of a pool by its name, for another use.
func (s *Server) Rename(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.Name = name
}

// FailInstalls makes the next n installimage runs fail.
func (s *Server) FailInstalls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failInstall = n
}

// State is the installed system's state ("" when none), and whether it runs now.
func (s *Server) State() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disk == nil {
		return "", false
	}
	return s.disk.state, s.system == systemInstalled
}

// HostKey is the installed system's host key, or nil.
func (s *Server) HostKey() ssh.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disk == nil {
		return nil
	}
	return s.disk.hostKey.PublicKey()
}

// Events are what happened to the server, in order.
func (s *Server) Events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

func (s *Server) eventf(format string, args ...any) {
	s.events = append(s.events, fmt.Sprintf(format, args...))
}

// Close powers the server off and closes its SSH endpoint.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.closed {
		close(s.stopped)
	}
	s.closed = true
	s.gen++
	stop := s.powerOffLocked()
	s.mu.Unlock()
	stop()
	s.ln.Close()
}

// Reset power-cycles the server: whatever runs stops (an install in progress leaves the disk
// without a system), and after Timings.Boot it runs the rescue system if one is armed (for
// this boot only), else its installed system.
func (s *Server) Reset() {
	s.mu.Lock()
	s.gen++
	gen := s.gen
	stop := s.powerOffLocked()
	if s.installing {
		s.installing = false
		s.disk = nil
		s.eventf("reset during installimage: the disk holds no system")
	}
	s.eventf("reset")
	s.mu.Unlock()
	stop()
	time.AfterFunc(s.cfg.Timings.Boot, func() {
		s.awaitHold()
		s.boot(gen)
	})
}

// HoldBoots makes the server's boots wait, as a server that hangs in its firmware's
// self-test does, until the returned function is called or the server is closed: a reset
// goes through, and whatever it boots answers SSH only after that.
func (s *Server) HoldBoots() (release func()) {
	held := make(chan struct{})
	s.mu.Lock()
	s.held = held
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.held == held {
				s.held = nil
			}
			s.mu.Unlock()
			close(held)
		})
	}
}

// awaitHold waits while boots are held.
func (s *Server) awaitHold() {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held == nil {
		return
	}
	select {
	case <-held:
	case <-s.stopped:
	}
}

// resetIf resets the server unless it was power-cycled since gen (a reboot going down).
func (s *Server) resetIf(gen int) {
	s.mu.Lock()
	same := s.gen == gen
	s.mu.Unlock()
	if same {
		s.Reset()
	}
}

// powerOffLocked stops the running system and returns a function that waits for its
// simulated machine to stop (call it without the lock).
func (s *Server) powerOffLocked() func() {
	s.system = systemNone
	s.rescueKey = nil
	s.rescueFiles = nil
	cancel, done := s.stopMachine, s.machineDone
	s.stopMachine, s.machineDone = nil, nil
	return func() {
		if cancel != nil {
			cancel()
			<-done
		}
	}
}

func (s *Server) boot(gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen || s.closed {
		return
	}
	if len(s.rescueArmed) > 0 || s.rescueOS != "" {
		key, err := newSigner()
		if err != nil {
			s.eventf("rescue boot failed: %v", err)
			return
		}
		s.system, s.rescueKey, s.rescueFiles = systemRescue, key, map[string][]byte{}
		s.rescueLast, s.rescueArmed, s.rescueOS = s.rescueArmed, nil, ""
		s.eventf("booted the rescue system")
		return
	}
	if s.disk == nil {
		s.eventf("booted: no operating system")
		return
	}
	s.system = systemInstalled
	s.eventf("booted the installed system (%s)", s.disk.state)
	if s.disk.state == robot.StateActive && len(s.disk.userData) > 0 {
		s.startMachineLocked()
	}
}

// startMachineLocked is cloud-init running the seed's user data: a simulated machine boots
// the kubelet, which joins with the token in it.
func (s *Server) startMachineLocked() {
	dir := s.cfg.StateDir
	userData := filepath.Join(dir, "user-data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.eventf("cloud-init seed not written: %v", err)
	} else if err := os.WriteFile(userData, s.disk.userData, 0o600); err != nil {
		s.eventf("cloud-init seed not written: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.stopMachine, s.machineDone = cancel, done
	// installimage installs a stock operating system.
	cfg := sim.MachineConfig{
		Image: sim.ImageStock,
		Name:  s.disk.hostname, UserDataPath: userData, Capacity: s.cfg.Capacity, StateDir: dir,
		HeartbeatInterval: s.cfg.Timings.HeartbeatInterval,
		Addresses:         []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: s.cfg.InstalledAddress}, {Type: corev1.NodeHostName, Address: s.disk.hostname}},
	}
	log := s.cfg.MachineLog
	go func() {
		defer close(done)
		_ = sim.RunMachine(ctx, cfg, log)
	}()
}

func (s *Server) armRescue(os string, keys []robot.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rescueOS, s.rescueArmed = os, keys
	if s.rescueArmed == nil {
		s.rescueArmed = []robot.Key{}
	}
	s.eventf("rescue armed (%s, %d keys)", os, len(keys))
}

func (s *Server) disarmRescue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rescueOS, s.rescueArmed = "", nil
}

func (s *Server) info(detail bool) map[string]any {
	s.mu.Lock()
	name := s.cfg.Name
	s.mu.Unlock()
	m := map[string]any{
		"server_ip": s.IP(), "server_ipv6_net": "2a01:4f8::", "server_number": s.cfg.Number, "server_name": name,
		"product": s.cfg.Product, "dc": s.cfg.DC, "traffic": "unlimited", "status": "ready", "cancelled": false,
		"paid_until": "2030-01-01", "ip": []string{s.IP()}, "subnet": nil,
	}
	if detail {
		m["reset"], m["rescue"], m["vnc"], m["windows"], m["plesk"], m["cpanel"], m["wol"], m["hot_swap"] =
			!s.cfg.NoReset, !s.cfg.NoRescue, true, false, false, false, true, false
		m["linked_storagebox"] = nil
	}
	return m
}

func (s *Server) rescueInfo(last bool) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]any{"server_ip": s.IP(), "server_ipv6_net": "2a01:4f8::", "server_number": s.cfg.Number, "host_key": []any{}}
	keys := s.rescueArmed
	active := s.rescueOS != ""
	if last {
		keys, active = s.rescueLast, false
	}
	authorized := make([]map[string]any, 0, len(keys))
	for _, k := range keys {
		authorized = append(authorized, map[string]any{"key": k})
	}
	m["authorized_key"] = authorized
	m["active"] = active
	if active {
		m["os"], m["password"] = s.rescueOS, nil
	} else if last {
		m["os"], m["password"] = "linux", nil
	} else {
		m["os"], m["password"] = []string{"linux", "vkvm"}, nil
	}
	return m
}

func (s *Server) operatingStatus() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.system == systemNone {
		return "not supported"
	}
	return "running"
}

func newSigner() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

// accept serves SSH: the system running at connect time answers with its host key and
// authorized keys; while the server boots (or has no system) connections are dropped.
func (s *Server) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.serveConn(conn)
	}
}

func (s *Server) serveConn(conn net.Conn) {
	defer conn.Close()
	s.mu.Lock()
	sys, gen := s.system, s.gen
	var hostKey ssh.Signer
	var authorized []ssh.PublicKey
	switch sys {
	case systemRescue:
		hostKey = s.rescueKey
		for _, k := range s.rescueLast {
			if pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.Data)); err == nil {
				authorized = append(authorized, pub)
			}
		}
	case systemInstalled:
		hostKey, authorized = s.disk.hostKey, s.disk.authorized
	}
	s.mu.Unlock()
	if hostKey == nil {
		return // nothing answers on port 22
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			for _, a := range authorized {
				if bytes.Equal(a.Marshal(), key.Marshal()) {
					return nil, nil
				}
			}
			return nil, errors.New("unauthorized key")
		},
	}
	cfg.AddHostKey(hostKey)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	sc, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return
	}
	_ = conn.SetDeadline(time.Time{})
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			return
		}
		go s.session(ch, chReqs, sys, gen)
	}
}

func (s *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request, sys system, gen int) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(false, nil)
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		stdin, _ := io.ReadAll(ch)
		out, errOut, status, after := s.exec(sys, gen, payload.Command, stdin)
		_, _ = ch.Write([]byte(out))
		_, _ = ch.Stderr().Write([]byte(errOut))
		_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(status)))
		ch.Close()
		if after != nil {
			after()
		}
		return
	}
}

// exec runs one command of package robot in the system that was running when the session
// started; anything else is not found.
func (s *Server) exec(sys system, gen int, cmd string, stdin []byte) (stdout, stderr string, status int, after func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return "", "connection reset\n", 255, nil
	}
	switch sys {
	case systemRescue:
		switch {
		case cmd == robot.WriteFileCommand(robot.InstallConfigPath):
			s.rescueFiles[robot.InstallConfigPath] = stdin
			return "", "", 0, nil
		case cmd == robot.WriteFileCommand(robot.PostInstallPath):
			s.rescueFiles[robot.PostInstallPath] = stdin
			return "", "", 0, nil
		case cmd == robot.CommandInstall:
			return s.installLocked(gen, false)
		case cmd == robot.CommandInstallDetached:
			return s.installLocked(gen, true)
		case cmd == robot.CommandReboot:
			return "", "", 0, func() { time.AfterFunc(s.cfg.Timings.Shutdown, func() { s.resetIf(gen) }) }
		}
	case systemInstalled:
		switch cmd {
		case robot.CommandState:
			return s.disk.state + "\n", "", 0, nil
		case robot.CommandJoin:
			if s.disk.state != robot.StateStandby {
				return "", "cloud-init: this system was joined already\n", 1, nil
			}
			s.disk.userData, s.disk.state = stdin, robot.StateActive
			s.eventf("join configuration delivered; cloud-init starts the kubelet")
			s.startMachineLocked()
			return "", "", 0, nil
		}
	}
	return "", "sh: 1: " + strings.Fields(cmd + " x")[0] + ": not found\n", 127, nil
}

// installLocked is installimage: it checks its configuration, runs Timings.Install, then
// the disk holds what the post-install script puts there. Detached, it returns at once and
// reboots after the install, as `nohup sh -c 'installimage ... && reboot' &` does.
func (s *Server) installLocked(gen int, detached bool) (string, string, int, func()) {
	conf := robot.ParseInstallConfig(string(s.rescueFiles[robot.InstallConfigPath]))
	post, err := robot.ParsePostInstall(string(s.rescueFiles[robot.PostInstallPath]))
	image := ""
	if v := conf["IMAGE"]; len(v) > 0 {
		image = v[len(v)-1]
	}
	var problem string
	switch {
	case len(conf["DRIVE1"]) == 0:
		problem = "ERROR: no DRIVE1 in the configuration"
	case !contains(s.cfg.Images, image):
		problem = fmt.Sprintf("ERROR: image %q not found", image)
	case err != nil:
		problem = "ERROR: post-install script: " + err.Error()
	}
	if problem != "" {
		return "", problem + "\n", 1, nil
	}
	hostKey, err := ssh.ParsePrivateKey(post.HostKeyPEM)
	if err != nil {
		return "", "ERROR: post-install script: host key: " + err.Error() + "\n", 1, nil
	}
	authorized, err := robot.ParseHostKey(post.AuthorizedKey)
	if err != nil {
		return "", "ERROR: post-install script: authorized key: " + err.Error() + "\n", 1, nil
	}
	fail := s.failInstall > 0
	if fail {
		s.failInstall--
	}
	hostname := "robot"
	if v := conf["HOSTNAME"]; len(v) > 0 {
		hostname = v[0]
	}
	s.installing = true
	s.disk = nil
	s.eventf("installimage started (%s)", image)
	state := robot.StateStandby
	if len(post.UserData) > 0 {
		state = robot.StateActive
	}
	result := make(chan bool, 1)
	time.AfterFunc(s.cfg.Timings.Install, func() {
		s.mu.Lock()
		if gen != s.gen || !s.installing {
			s.mu.Unlock()
			result <- false
			return
		}
		s.installing = false
		if fail {
			s.eventf("installimage failed")
			s.mu.Unlock()
			result <- false
			return
		}
		_ = os.RemoveAll(s.cfg.StateDir)
		s.disk = &disk{hostKey: hostKey, authorized: []ssh.PublicKey{authorized}, userData: post.UserData, state: state, hostname: hostname}
		s.eventf("installimage finished (%s)", state)
		s.mu.Unlock()
		result <- true
	})
	if detached {
		go func() {
			if <-result {
				s.Reset()
			}
		}()
		return "", "", 0, nil
	}
	s.mu.Unlock()
	ok := <-result
	s.mu.Lock()
	if !ok {
		return "", "ERROR: An error occurred while installing the new system!\n", 1, nil
	}
	return "                Installation complete\n", "", 0, nil
}
