// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package image

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netNS is a network namespace of the test's: only its loopback interface, up, and on it a
// listener for each forwarded address that connects to the same address outside. So a
// program started in it reaches those addresses (the test's API server) and nothing else.
//
// It lives on one OS thread, locked and never unlocked (the Go runtime then ends the thread
// with its goroutine): unshare(CLONE_NEWNET) moves that thread alone, the listeners are made
// there, and programs are started from it, so their processes are born in the namespace.
// Everything else, the forwarders' connections outside included, runs on other threads.
type netNS struct {
	jobs chan func()
}

// newNetNS makes the namespace and forwards each of addrs (host:port, TCP) out of it.
func newNetNS(t *testing.T, addrs ...string) *netNS {
	t.Helper()
	ns := &netNS{jobs: make(chan func())}
	ready := make(chan error, 1)
	var listeners []net.Listener
	go func() {
		runtime.LockOSThread() // never unlocked: this thread's namespace is not the process's
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			ready <- err
			return
		}
		for _, a := range addrs {
			l, err := net.Listen("tcp", a)
			if err != nil {
				ready <- fmt.Errorf("listening on %s in the namespace: %w", a, err)
				return
			}
			listeners = append(listeners, l)
		}
		ready <- nil
		for job := range ns.jobs {
			job()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, l := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			forward(l, addrs[i])
		}()
	}
	t.Cleanup(func() {
		close(ns.jobs)
		for _, l := range listeners {
			_ = l.Close()
		}
		wg.Wait()
	})
	return ns
}

// start starts cmd in the namespace.
func (ns *netNS) start(cmd *exec.Cmd) error {
	errs := make(chan error, 1)
	ns.jobs <- func() { errs <- cmd.Start() }
	return <-errs
}

// dial connects to addr (host:port, TCP) inside the namespace, where a program started in
// it listens: the socket is made on the namespace's thread and belongs to the namespace for
// good, so the connection may then be used from any goroutine.
func (ns *netNS) dial(addr string) (net.Conn, error) {
	type dialed struct {
		conn net.Conn
		err  error
	}
	out := make(chan dialed, 1)
	ns.jobs <- func() {
		conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		out <- dialed{conn, err}
	}
	d := <-out
	return d.conn, d.err
}

// loopbackUp sets the calling thread's namespace's lo up (SIOCSIFFLAGS, as `ip link set lo
// up` does).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("setting lo up: %w", err)
	}
	return nil
}

// forward accepts connections in the namespace and joins each to a new one to addr outside,
// until l is closed. A joined pair ends when either side closes.
func forward(l net.Listener, addr string) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = in.Close() }()
			out, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer func() { _ = out.Close() }()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(out, in)
				_ = out.(*net.TCPConn).CloseWrite()
				close(done)
			}()
			_, _ = io.Copy(in, out)
			_ = in.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}
