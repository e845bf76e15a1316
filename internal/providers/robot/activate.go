// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Path is how a leased server becomes a node.
type Path string

const (
	// Warm: the installed OS and kubelet wait in standby; the join configuration arrives over
	// SSH (pinned to the host key recorded at install) and the server joins in seconds.
	Warm Path = "warm"
	// Cold: rescue system, hardware reset, installimage with the cloud-init seed, reboot;
	// minutes, often more than Karpenter's 15-minute registration window.
	Cold Path = "cold"
)

// Attributes the fulfiller keeps on a server's inventory item (statelock.LeasePool).
const (
	// AttrHostKey is the installed system's host key (authorized_keys format), recorded
	// before the install that puts it there and pinned on every later connection.
	AttrHostKey = "host-key"
	// AttrState is where the server is: installing (cold activation), active, reinstalling
	// (after a release), standby (warm, free to lease).
	AttrState = "state"
)

// States of AttrState besides StateStandby and StateActive.
const (
	StateInstalling   = "installing"
	StateReinstalling = "reinstalling"
)

// Errors of activation and release; test them with errors.Is.
var (
	// ErrNotStandby: a warm activation found the server not waiting in standby: it is in use
	// (outside the pool, or by a claim), or was not installed by the fulfiller.
	ErrNotStandby = errors.New("server is not in standby")
	// ErrInstallFailed: installimage failed, or the installed system did not come up.
	ErrInstallFailed = errors.New("install failed")
	// ErrRescueUnreachable: the rescue system did not answer after the reset.
	ErrRescueUnreachable = errors.New("rescue system unreachable")
	// ErrServerChanged: the webservice no longer describes the server as the pool keeper's
	// listing did (renamed, another product, cancelled): it may have left the pool.
	ErrServerChanged = errors.New("server changed since the account was read")
)

// notStandbyCauses ends the message of ErrNotStandby.
const notStandbyCauses = "it is in use, outside the pool or by another claim, or was not installed by the fulfiller"

// Recorder keeps what an activation learns about a server (its new host key, its state) in
// the server's inventory item.
type Recorder interface {
	Record(ctx context.Context, server int, attrs map[string]string) error
}

// Activator activates and releases leased servers.
type Activator struct {
	Client *Client
	// Signer is the fulfiller's SSH key: registered with Robot for the rescue system and
	// authorized for root in every system it installs.
	Signer ssh.Signer
	// Recorder records host keys and states; required for cold activation and release.
	Recorder Recorder
	// SSHHost replaces the server's main IP from the webservice (tests, a bastion-less
	// private network); SSHPort is the SSH port (default 22).
	SSHHost string
	SSHPort int
	// PollInterval is how often an unreachable SSH endpoint is tried again (default 5s).
	PollInterval time.Duration
	// RescueTimeout bounds the wait for the rescue system after the reset (default 10m);
	// InstallTimeout bounds installimage and the first boot of the installed system (30m);
	// WarmTimeout the wait for a standby server's SSH (default 2m).
	RescueTimeout, InstallTimeout, WarmTimeout time.Duration
	// Log receives progress lines (never a secret).
	Log io.Writer
}

// Activation is one claim's activation of its leased server.
type Activation struct {
	Server int
	Path   Path
	// HostKey is the host key recorded at the server's last install; a warm activation
	// refuses a server presenting another one.
	HostKey string
	// UserData is the claim's cloud-init user data (kubeadm join with its token).
	UserData []byte
	// Hostname, Image and Drives configure a cold install.
	Hostname string
	Image    string
	Drives   []string
}

// Release is the return of a server to standby after its claim is gone.
type Release struct {
	Server   int
	Hostname string
	Image    string
	Drives   []string
	// Expect, when set, is the server as the account's listing described it when the pool
	// keeper chose to install it: a server the webservice now names otherwise, of another
	// product, or cancelled is not touched (ErrServerChanged).
	Expect *Server
}

// Outcome is what the module outputs.
type Outcome struct {
	// Address is the server's main IP.
	Address string
	// HostKey is the installed system's host key after the operation.
	HostKey string
}

func (a *Activator) logf(format string, args ...any) {
	if a.Log != nil {
		fmt.Fprintf(a.Log, "robot: "+format+"\n", args...)
	}
}

func (a *Activator) poll() time.Duration {
	if a.PollInterval > 0 {
		return a.PollInterval
	}
	return 5 * time.Second
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// target is the SSH address of a server whose main IP is ip.
func (a *Activator) target(ip string, hostKey ssh.HostKeyCallback) SSHTarget {
	host := ip
	if a.SSHHost != "" {
		host = a.SSHHost
	}
	port := a.SSHPort
	if port == 0 {
		port = 22
	}
	return SSHTarget{Addr: net.JoinHostPort(host, strconv.Itoa(port)), Signer: a.Signer, HostKey: hostKey}
}

// Activate turns the leased server into the claim's node.
func (a *Activator) Activate(ctx context.Context, act Activation) (Outcome, error) {
	srv, err := a.Client.GetServer(ctx, act.Server)
	if err != nil {
		return Outcome{}, fmt.Errorf("reading server %d: %w", act.Server, err)
	}
	switch act.Path {
	case Warm:
		return a.activateWarm(ctx, srv, act)
	case Cold:
		return a.activateCold(ctx, srv, act)
	}
	return Outcome{}, fmt.Errorf("unknown activation path %q (warm or cold)", act.Path)
}

func (a *Activator) activateWarm(ctx context.Context, srv *Server, act Activation) (Outcome, error) {
	if act.HostKey == "" {
		return Outcome{}, fmt.Errorf("warm activation of server %d needs the host key recorded at its install", srv.Number)
	}
	pinned, err := ParseHostKey(act.HostKey)
	if err != nil {
		return Outcome{}, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, orDefault(a.WarmTimeout, 2*time.Minute))
	defer cancel()
	c, err := WaitSSH(waitCtx, a.target(srv.IP, PinnedHostKey(pinned)), a.poll())
	if err != nil {
		return Outcome{}, fmt.Errorf("server %d: %w", srv.Number, err)
	}
	defer c.Close()
	out, err := c.Run(ctx, CommandState, nil)
	if state := strings.TrimSpace(string(out)); err != nil {
		return Outcome{}, fmt.Errorf("%w: server %d reports state %q (%w): %s", ErrNotStandby, srv.Number, state, err, notStandbyCauses)
	} else if state != StateStandby {
		return Outcome{}, fmt.Errorf("%w: server %d reports state %q: %s", ErrNotStandby, srv.Number, state, notStandbyCauses)
	}
	a.logf("server %d is in standby with the recorded host key %s; delivering the join configuration", srv.Number, ssh.FingerprintSHA256(pinned))
	if _, err := c.Run(ctx, CommandJoin, bytes.NewReader(act.UserData)); err != nil {
		return Outcome{}, fmt.Errorf("server %d: delivering the join configuration: %w", srv.Number, err)
	}
	if a.Recorder != nil {
		if err := a.Recorder.Record(ctx, srv.Number, map[string]string{AttrState: StateActive}); err != nil {
			return Outcome{}, err
		}
	}
	a.logf("server %d runs cloud-init with the claim's user data; its kubelet joins", srv.Number)
	return Outcome{Address: srv.IP, HostKey: FormatHostKey(pinned)}, nil
}

func (a *Activator) activateCold(ctx context.Context, srv *Server, act Activation) (Outcome, error) {
	if len(act.UserData) == 0 {
		return Outcome{}, fmt.Errorf("cold activation of server %d needs user data", srv.Number)
	}
	rescue, rescueKey, err := a.bootRescue(ctx, srv)
	if err != nil {
		return Outcome{}, err
	}
	defer rescue.Close()
	hostPub, err := a.install(ctx, rescue, srv, act.Hostname, act.Image, act.Drives, act.UserData, StateInstalling)
	if err != nil {
		return Outcome{}, err
	}
	installCtx, cancel := context.WithTimeout(ctx, orDefault(a.InstallTimeout, 30*time.Minute))
	defer cancel()
	if _, err := rescue.Run(installCtx, CommandInstall, nil); err != nil {
		return Outcome{}, fmt.Errorf("%w: server %d: installimage: %w", ErrInstallFailed, srv.Number, err)
	}
	a.logf("server %d installed; rebooting into the installed system", srv.Number)
	_, _ = rescue.Run(ctx, CommandReboot, nil) // the connection drops as the system goes down
	// Until it has gone down, the rescue system answers with its own key: not up yet.
	c, err := WaitSSH(installCtx, a.target(srv.IP, PinnedHostKeyReplacing(hostPub, rescueKey)), a.poll())
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: server %d: the installed system did not come up: %w", ErrInstallFailed, srv.Number, err)
	}
	c.Close()
	if err := a.Recorder.Record(ctx, srv.Number, map[string]string{AttrState: StateActive}); err != nil {
		return Outcome{}, err
	}
	a.logf("server %d booted the installed system (host key %s); cloud-init joins it", srv.Number, ssh.FingerprintSHA256(hostPub))
	return Outcome{Address: srv.IP, HostKey: FormatHostKey(hostPub)}, nil
}

// Release reinstalls the server as a standby in the background: rescue system, reset, then
// installimage and the reboot run detached on the server, and Release returns. The new host
// key and the state "reinstalling" are recorded first; the pool keeper (Probe) sees the
// server reach standby.
func (a *Activator) Release(ctx context.Context, rel Release) (Outcome, error) {
	srv, err := a.Client.GetServer(ctx, rel.Server)
	if err != nil {
		return Outcome{}, fmt.Errorf("reading server %d: %w", rel.Server, err)
	}
	if e := rel.Expect; e != nil && (srv.Name != e.Name || srv.Product != e.Product || srv.Cancelled) {
		return Outcome{}, fmt.Errorf("%w: server %d is now %q (%s, cancelled %v), listed as %q (%s): not installed",
			ErrServerChanged, srv.Number, srv.Name, srv.Product, srv.Cancelled, e.Name, e.Product)
	}
	rescue, _, err := a.bootRescue(ctx, srv)
	if err != nil {
		return Outcome{}, err
	}
	defer rescue.Close()
	hostPub, err := a.install(ctx, rescue, srv, rel.Hostname, rel.Image, rel.Drives, nil, StateReinstalling)
	if err != nil {
		return Outcome{}, err
	}
	if _, err := rescue.Run(ctx, CommandInstallDetached, nil); err != nil {
		return Outcome{}, fmt.Errorf("server %d: starting the reinstall: %w", srv.Number, err)
	}
	a.logf("server %d reinstalls as a standby in the background (new host key %s)", srv.Number, ssh.FingerprintSHA256(hostPub))
	return Outcome{Address: srv.IP, HostKey: FormatHostKey(hostPub)}, nil
}

// Probe reports the installed system's state (standby, active), connecting with the pinned
// host key to the address the webservice gives (one GET /server/{n}).
func (a *Activator) Probe(ctx context.Context, server int, hostKey string) (string, error) {
	srv, err := a.Client.GetServer(ctx, server)
	if err != nil {
		return "", fmt.Errorf("reading server %d: %w", server, err)
	}
	return a.ProbeAt(ctx, *srv, hostKey)
}

// ProbeAt is Probe at the address of srv as the account's listing gave it, without a
// webservice request: the pool keeper probes reinstalling and unverified servers every
// round, and GET /server/{n} shares GET /server's 200 an hour.
func (a *Activator) ProbeAt(ctx context.Context, srv Server, hostKey string) (string, error) {
	pinned, err := ParseHostKey(hostKey)
	if err != nil {
		return "", err
	}
	c, err := DialSSH(ctx, a.target(srv.IP, PinnedHostKey(pinned)))
	if err != nil {
		return "", err
	}
	defer c.Close()
	out, err := c.Run(ctx, CommandState, nil)
	if err != nil {
		return "", fmt.Errorf("server %d: %w", srv.Number, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// bootRescue arms the rescue system with the fulfiller's key, resets the server into it and
// logs in; it returns the connection and the rescue system's host key. That key is new at
// every boot and the webservice does not document how it reports it, so the first key seen
// is trusted; only the fulfiller's key logs in to it.
func (a *Activator) bootRescue(ctx context.Context, srv *Server) (*SSHClient, ssh.PublicKey, error) {
	fp, err := a.ensureKey(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := a.Client.ActivateRescue(ctx, srv.Number, "linux", []string{fp}); err != nil {
		return nil, nil, fmt.Errorf("server %d: activating the rescue system: %w", srv.Number, err)
	}
	if err := a.Client.Reset(ctx, srv.Number, ResetHardware); err != nil {
		return nil, nil, fmt.Errorf("server %d: resetting into the rescue system: %w", srv.Number, err)
	}
	a.logf("server %d: rescue system armed with key %s, hardware reset sent; waiting for it", srv.Number, fp)
	waitCtx, cancel := context.WithTimeout(ctx, orDefault(a.RescueTimeout, 10*time.Minute))
	defer cancel()
	var firstUse FirstUse
	c, err := WaitSSH(waitCtx, a.target(srv.IP, firstUse.Callback()), a.poll())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: server %d: %w", ErrRescueUnreachable, srv.Number, err)
	}
	a.logf("server %d: logged in to the rescue system (host key %s)", srv.Number, ssh.FingerprintSHA256(firstUse.Key()))
	return c, firstUse.Key(), nil
}

// install writes installimage's configuration and the post-install script (with a new host
// key, and the user data of a cold activation) to the rescue system, and records the new
// host key and state before anything is installed, so that a runner dying later leaves the
// key known.
func (a *Activator) install(ctx context.Context, rescue *SSHClient, srv *Server, hostname, image string, drives []string, userData []byte, state string) (ssh.PublicKey, error) {
	if a.Recorder == nil {
		return nil, fmt.Errorf("server %d: installing needs somewhere to record the new host key", srv.Number)
	}
	if image == "" || len(drives) == 0 {
		return nil, fmt.Errorf("server %d: installing needs an image and drives", srv.Number)
	}
	if hostname == "" {
		hostname = fmt.Sprintf("robot-%d", srv.Number)
	}
	hostPEM, hostPub, err := NewHostKey()
	if err != nil {
		return nil, err
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	post := PostInstall{
		HostKeyPEM: hostPEM, AuthorizedKey: FormatHostKey(a.Signer.PublicKey()), UserData: userData,
		InstanceID: fmt.Sprintf("robot-%d-%s", srv.Number, hex.EncodeToString(id)),
	}
	files := []struct{ path, content string }{
		{InstallConfigPath, InstallConfig(hostname, image, drives)},
		{PostInstallPath, post.Script()},
	}
	for _, f := range files {
		if _, err := rescue.Run(ctx, WriteFileCommand(f.path), strings.NewReader(f.content)); err != nil {
			return nil, fmt.Errorf("server %d: writing %s: %w", srv.Number, f.path, err)
		}
	}
	if err := a.Recorder.Record(ctx, srv.Number, map[string]string{AttrHostKey: FormatHostKey(hostPub), AttrState: state}); err != nil {
		return nil, err
	}
	return hostPub, nil
}

// ensureKey makes sure the fulfiller's public key is an SSH key of the account and returns
// its fingerprint.
func (a *Activator) ensureKey(ctx context.Context) (string, error) {
	pub := a.Signer.PublicKey()
	fp := MD5Fingerprint(pub)
	if _, err := a.Client.GetKey(ctx, fp); err == nil {
		return fp, nil
	} else if !IsCode(err, CodeNotFound) {
		return "", fmt.Errorf("reading SSH key %s: %w", fp, err)
	}
	if _, err := a.Client.CreateKey(ctx, "fulfiller", FormatHostKey(pub)); err != nil && !IsCode(err, CodeKeyAlreadyExists) {
		return "", fmt.Errorf("adding the fulfiller's SSH key %s: %w", fp, err)
	}
	return fp, nil
}
