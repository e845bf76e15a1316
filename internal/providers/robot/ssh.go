// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/md5"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// HostKeyMismatchError: the server presented a host key other than the one recorded when its
// OS was installed. The connection is refused: someone else answers at that address, or the
// server was reinstalled behind the pool's back.
type HostKeyMismatchError struct {
	Addr string
	// Want and Got are SHA256 fingerprints (as ssh-keygen -l prints them).
	Want, Got string
}

func (e *HostKeyMismatchError) Error() string {
	return fmt.Sprintf("host key of %s changed: it presents %s, the key recorded at install is %s; refusing to connect",
		e.Addr, e.Got, e.Want)
}

// PinnedHostKey accepts exactly the host key pinned and fails with a *HostKeyMismatchError
// otherwise.
func PinnedHostKey(pinned ssh.PublicKey) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if bytes.Equal(key.Marshal(), pinned.Marshal()) {
			return nil
		}
		return &HostKeyMismatchError{Addr: addrOf(hostname, remote), Want: ssh.FingerprintSHA256(pinned), Got: ssh.FingerprintSHA256(key)}
	}
}

// errGoingDown: the system being replaced still answers (a reboot that has not gone down).
var errGoingDown = errors.New("the system being replaced still answers")

// PinnedHostKeyReplacing is PinnedHostKey for a system that replaces another presenting
// previous (the rescue system rebooting into the installed one): previous's key is a system
// not up yet, and WaitSSH keeps waiting; any other key is refused.
func PinnedHostKeyReplacing(pinned, previous ssh.PublicKey) ssh.HostKeyCallback {
	check := PinnedHostKey(pinned)
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if previous != nil && bytes.Equal(key.Marshal(), previous.Marshal()) {
			return fmt.Errorf("ssh %s: %w (host key %s)", addrOf(hostname, remote), errGoingDown, ssh.FingerprintSHA256(key))
		}
		return check(hostname, remote, key)
	}
}

// FirstUse accepts the first host key it is shown and keeps it; later connections through the
// same callback must present that key. It is for the rescue system, whose key is new at every
// boot and which only our authorized key can log in to.
type FirstUse struct {
	mu  sync.Mutex
	key ssh.PublicKey
}

// Callback is the host key callback.
func (f *FirstUse) Callback() ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.key == nil {
			f.key = key
			return nil
		}
		return PinnedHostKey(f.key)(hostname, remote, key)
	}
}

// Key is the key seen first, or nil.
func (f *FirstUse) Key() ssh.PublicKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.key
}

func addrOf(hostname string, remote net.Addr) string {
	if remote != nil {
		return remote.String()
	}
	return hostname
}

// ParseHostKey reads a host key in authorized_keys format ("ssh-ed25519 AAAA...").
func ParseHostKey(s string) (ssh.PublicKey, error) {
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(s)))
	if err != nil {
		return nil, fmt.Errorf("parsing host key %q: %w", truncate(s, 40), err)
	}
	return key, nil
}

// FormatHostKey writes key in authorized_keys format, without a trailing newline.
func FormatHostKey(key ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
}

// MD5Fingerprint is the fingerprint the Robot webservice names keys by
// ("cb:8b:ef:...").
func MD5Fingerprint(key ssh.PublicKey) string {
	sum := md5.Sum(key.Marshal())
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02x", b)
	}
	return strings.Join(parts, ":")
}

// NewHostKey generates an ed25519 host key for an OS about to be installed: its private part
// in OpenSSH PEM format (what goes to /etc/ssh/ssh_host_ed25519_key) and its public key, which
// is recorded and pinned.
func NewHostKey() (privatePEM []byte, public ssh.PublicKey, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, fmt.Errorf("encoding a host key: %w", err)
	}
	public, err = ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding a host key: %w", err)
	}
	return pem.EncodeToMemory(block), public, nil
}

// SSHTarget is where and how to log in.
type SSHTarget struct {
	Addr    string // host:port
	User    string // default root
	Signer  ssh.Signer
	HostKey ssh.HostKeyCallback
	// Timeout bounds the TCP connect and handshake (default 15s).
	Timeout time.Duration
}

// SSHClient is a logged-in SSH connection.
type SSHClient struct {
	addr   string
	client *ssh.Client
}

// DialSSH logs in to target. A host key the callback refuses is returned as is (test with
// errors.As for *HostKeyMismatchError); nothing is sent to such a host.
func DialSSH(ctx context.Context, target SSHTarget) (*SSHClient, error) {
	if target.Signer == nil || target.HostKey == nil {
		return nil, errors.New("ssh: a client key and a host key check are required")
	}
	user := target.User
	if user == "" {
		user = "root"
	}
	timeout := target.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	var hostKeyErr error
	cfg := &ssh.ClientConfig{
		User: user,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(target.Signer)},
		HostKeyCallback: func(hostname string, remote net.Addr, key ssh.PublicKey) error {
			hostKeyErr = target.HostKey(hostname, remote, key)
			return hostKeyErr
		},
		Timeout: timeout,
	}
	dialCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dialCtx, "tcp", target.Addr)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", target.Addr, err)
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	c, chans, reqs, err := ssh.NewClientConn(conn, target.Addr, cfg)
	if err != nil {
		conn.Close()
		if hostKeyErr != nil {
			return nil, hostKeyErr
		}
		return nil, fmt.Errorf("ssh %s: %w", target.Addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return &SSHClient{addr: target.Addr, client: ssh.NewClient(c, chans, reqs)}, nil
}

// WaitSSH dials target until it succeeds or ctx ends, every interval. A refused host key
// ends the wait at once: a different machine answering will not become ours by waiting.
func WaitSSH(ctx context.Context, target SSHTarget, interval time.Duration) (*SSHClient, error) {
	var last error
	for {
		c, err := DialSSH(ctx, target)
		if err == nil {
			return c, nil
		}
		var mismatch *HostKeyMismatchError
		if errors.As(err, &mismatch) {
			return nil, err
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for ssh on %s: %w (last: %w)", target.Addr, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// CommandError is a remote command that exited non-zero.
type CommandError struct {
	Command string
	Status  int
	// Output is the end of what the command printed (stdout and stderr).
	Output string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s exited with status %d: %s", firstWord(e.Command), e.Status, e.Output)
}

// Run runs cmd with stdin (may be nil) and returns what it printed on stdout. A non-zero
// exit is a *CommandError carrying the end of its output. ctx ending closes the session.
func (c *SSHClient) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	sess, err := c.client.NewSession()
	if err != nil {
		return nil, fmt.Errorf("ssh %s: opening a session: %w", c.addr, err)
	}
	defer sess.Close()
	// The session copies stdout and stderr in two goroutines: both write combined.
	var stdout bytes.Buffer
	combined := &lockedBuffer{}
	sess.Stdout = io.MultiWriter(&stdout, combined)
	sess.Stderr = combined
	if stdin != nil {
		sess.Stdin = stdin
	}
	done := make(chan error, 1)
	go func() { done <- sess.Run(cmd) }()
	select {
	case <-ctx.Done():
		sess.Close()
		return nil, fmt.Errorf("ssh %s: %s: %w", c.addr, firstWord(cmd), ctx.Err())
	case err = <-done:
	}
	var exit *ssh.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.Bytes(), &CommandError{Command: cmd, Status: exit.ExitStatus(), Output: tail(combined.String(), 400)}
	case err != nil:
		return stdout.Bytes(), fmt.Errorf("ssh %s: %s: %w", c.addr, firstWord(cmd), err)
	}
	return stdout.Bytes(), nil
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Close closes the connection.
func (c *SSHClient) Close() error { return c.client.Close() }

func firstWord(cmd string) string {
	if f := strings.Fields(cmd); len(f) > 0 {
		return f[0]
	}
	return cmd
}

func tail(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
