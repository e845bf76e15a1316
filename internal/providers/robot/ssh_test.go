// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/standin"
)

// A server installed with a recorded host key is reachable with that key pinned; once its
// key changes, the connection is refused with both fingerprints and nothing is run.
func TestHostKeyPinning(t *testing.T) {
	t.Parallel()
	api := startAPI(t, nil)
	srv := addServer(t, api, standin.ServerConfig{Number: 321, Timings: standin.Timings{Boot: 10 * time.Millisecond}})
	signer := newSSHKey(t)
	recorded, err := srv.InstallStandby(signer.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	target := robot.SSHTarget{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.SSHPort())), Signer: signer, HostKey: robot.PinnedHostKey(recorded)}
	c, err := robot.WaitSSH(ctx, target, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Run(ctx, robot.CommandState, nil)
	c.Close()
	if err != nil || strings.TrimSpace(string(out)) != robot.StateStandby {
		t.Fatalf("state = %q, %v", out, err)
	}

	if err := srv.ReplaceHostKey(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = robot.WaitSSH(ctx, target, 20*time.Millisecond)
	var mismatch *robot.HostKeyMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("a changed host key: %v", err)
	}
	if mismatch.Want != ssh.FingerprintSHA256(recorded) || mismatch.Got != ssh.FingerprintSHA256(srv.HostKey()) || mismatch.Want == mismatch.Got {
		t.Errorf("mismatch %+v; recorded %s, presented %s", mismatch, ssh.FingerprintSHA256(recorded), ssh.FingerprintSHA256(srv.HostKey()))
	}
	if !strings.Contains(err.Error(), "refusing to connect") || robot.Reason(err) != robotrules.ReasonHostKeyMismatch {
		t.Errorf("message %q, reason %s", err, robot.Reason(err))
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("WaitSSH kept trying a refused host key for %s", time.Since(start))
	}

	// Another client key is not let in.
	target.Signer, target.HostKey = newSSHKey(t), robot.PinnedHostKey(srv.HostKey())
	if _, err := robot.DialSSH(ctx, target); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("an unauthorized client key: %v", err)
	}
}

func TestPostInstallRoundTrip(t *testing.T) {
	pem, pub, err := robot.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	in := robot.PostInstall{HostKeyPEM: pem, AuthorizedKey: robot.FormatHostKey(pub), UserData: []byte("#cloud-config\nruncmd: ['echo $(x) `y` \\'z\\'']\n"), InstanceID: "robot-321-abc"}
	out, err := robot.ParsePostInstall(in.Script())
	if err != nil {
		t.Fatal(err)
	}
	if string(out.HostKeyPEM) != string(pem) || out.AuthorizedKey != in.AuthorizedKey || string(out.UserData) != string(in.UserData) || out.InstanceID != in.InstanceID {
		t.Errorf("round trip: %+v", out)
	}
	if strings.Contains(in.Script(), "runcmd") {
		t.Error("the user data is in the script in clear")
	}
}
