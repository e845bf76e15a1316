// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/robotrules"
	"github.com/fulfiller-sh/fulfiller/internal/providers/robot/standin"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// TestModuleReleasesAFailedActivation: an activation that fails (installimage fails) or is
// interrupted (the claim deleted mid-install: the runner's context ends, tofu is sent
// SIGINT) taints the server's resource, and tofu skips a tainted resource's destroy-time
// provisioners. The server, half installed with the claim's user data or in the rescue
// system, is released all the same: its destroy resets it and reinstalls it as a standby,
// and it comes back to standby with the host key recorded for that reinstall.
func TestModuleReleasesAFailedActivation(t *testing.T) {
	t.Parallel()
	p := newPool(t, "robot-tainted")
	failing := p.server(t, 441, false)
	failing.FailInstalls(1)
	slow := fastTimings
	slow.Install = 20 * time.Second // the claim is deleted while installimage runs
	interrupted := addServer(t, p.api, standin.ServerConfig{
		Number: 442, Name: "pool-442", Product: "AX52", DC: "FSN1-DC1", Timings: slow,
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")},
	})
	if err := p.inv.Ensure(context.Background(), "442"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		srv       *standin.Server
		interrupt bool
	}{
		{name: "robot-tainted-failed", srv: failing},
		{name: "robot-tainted-interrupted", srv: interrupted, interrupt: true},
	} {
		id := strconv.Itoa(tc.srv.Number())
		holder, _ := p.lease(t, tc.name, tc.srv.Number())
		params := map[string]string{"server_number": id, "activation_path": "cold", "lease_holder": holder}
		userData, tok := p.userData(t, tc.name, tc.srv.Number())
		apply := p.request(t, tc.name, tfrunner.Apply, tc.srv, userData, params)
		var res tfrunner.Result
		var log string
		if tc.interrupt {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			var buf testenv.SyncBuffer
			go func() {
				defer close(done)
				res = tfrunner.Run(ctx, apply, &buf, tfrunner.RuleSet{v1alpha1.FamilyRobot: robotrules.Rules{}})
			}()
			testenv.Eventually(t, 2*time.Minute, "installimage to start on server "+id, func() bool {
				return slices.ContainsFunc(tc.srv.Events(), func(e string) bool { return strings.HasPrefix(e, "installimage started") })
			})
			cancel()
			<-done
			log = buf.String()
			if res.Succeeded || res.Error == nil || res.Error.Class != tfrunner.Cancelled {
				t.Fatalf("%s: interrupted apply: %+v\n%s", tc.name, res.Error, log)
			}
		} else {
			res, log = p.run(t, apply, tok.Secret)
			if res.Succeeded {
				t.Fatalf("%s: an apply whose installimage fails succeeded", tc.name)
			}
		}
		it, err := p.inv.Get(context.Background(), id)
		if err != nil || it.Attributes[robot.AttrState] != robot.StateInstalling {
			t.Fatalf("%s: inventory after the activation stopped: %+v, %v\n%s", tc.name, it, err, log)
		}
		claimKey := it.Attributes[robot.AttrHostKey]

		events := len(tc.srv.Events())
		res, log = p.run(t, p.request(t, tc.name, tfrunner.Destroy, tc.srv, userData, params), tok.Secret)
		if !res.Succeeded {
			t.Fatalf("%s: destroy: %+v\n%s", tc.name, res.Error, log)
		}
		if got := tc.srv.Events()[events:]; !slices.Contains(got, "reset") {
			t.Errorf("%s: the destroy did not reset the server into the rescue system: %v\n%s", tc.name, got, log)
		}
		it, err = p.inv.Get(context.Background(), id)
		if err != nil || it.Attributes[robot.AttrState] != robot.StateReinstalling || it.Attributes[robot.AttrHostKey] == claimKey || it.Holder != holder {
			t.Fatalf("%s: inventory right after destroy: %+v, %v; want reinstalling with a new host key, still leased to the claim\n%s", tc.name, it, err, log)
		}
		keeper := &robot.Activator{Client: newClient(t, p.api, nil), Signer: p.signer, SSHHost: "127.0.0.1", SSHPort: tc.srv.SSHPort()}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("server %s: %v", id, tc.srv.Events())
			}
		})
		// Probed over SSH only, as the pool keeper does: no webservice read per probe.
		listed := robot.Server{Number: tc.srv.Number(), IP: tc.srv.IP()}
		var probed string
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("server %s: last probe %s", id, probed)
			}
		})
		testenv.Eventually(t, 2*time.Minute, "server "+id+" to reinstall and return to standby", func() bool {
			state, err := keeper.ProbeAt(context.Background(), listed, it.Attributes[robot.AttrHostKey])
			probed = fmt.Sprintf("%q, %v", state, err)
			return err == nil && state == robot.StateStandby
		})
	}
}

// TestModuleReleasesANodeOfTheEarlierModule: a node activated by the module as 0.1.0 shipped
// it (testdata/hetzner-robot-0.1.0, whose server resource released the server from its own
// destroy-time provisioner) is released once by this version's destroy, which finds no
// release resource in its state.
func TestModuleReleasesANodeOfTheEarlierModule(t *testing.T) {
	t.Parallel()
	p := newPool(t, "robot-upgrade")
	srv := p.server(t, 451, true)
	const name = "robot-upgrade-a"
	holder, item := p.lease(t, name, 451)
	userData, tok := p.userData(t, name, 451)
	params := map[string]string{"server_number": "451", "activation_path": "warm", "host_key": item.Attributes[robot.AttrHostKey], "lease_holder": holder}
	testenv.Eventually(t, 30*time.Second, "the standby server to boot", func() bool { _, up := srv.State(); return up })

	apply := p.request(t, name, tfrunner.Apply, srv, userData, params)
	old, err := filepath.Abs(filepath.Join("testdata", "hetzner-robot-0.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	apply.ModuleDir = old
	if res, log := p.run(t, apply, tok.Secret); !res.Succeeded {
		t.Fatalf("apply with the 0.1.0 module: %+v\n%s", res.Error, log)
	}
	events := len(srv.Events())
	res, log := p.run(t, p.request(t, name, tfrunner.Destroy, srv, userData, params), tok.Secret)
	if !res.Succeeded {
		t.Fatalf("destroy: %+v\n%s", res.Error, log)
	}
	if got := srv.Events()[events:]; countOf(got, "reset") != 1 {
		t.Errorf("the destroy of the 0.1.0 node: events %v, want one release\n%s", got, log)
	}
	if it, err := p.inv.Get(context.Background(), "451"); err != nil || it.Attributes[robot.AttrState] != robot.StateReinstalling || it.Attributes[robot.AttrHostKey] == item.Attributes[robot.AttrHostKey] {
		t.Errorf("inventory right after destroy: %+v, %v", it, err)
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, e := range list {
		if e == s {
			n++
		}
	}
	return n
}
