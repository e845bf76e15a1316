// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// metadataService is a cloud's metadata service for tests: it answers the instance ID at
// /hetzner/v1/metadata/instance-id and counts the requests.
type metadataService struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
}

func newMetadataService(t *testing.T, instanceID string) *metadataService {
	t.Helper()
	m := &metadataService{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.paths = append(m.paths, r.URL.Path)
		m.mu.Unlock()
		if r.URL.Path != "/hetzner/v1/metadata/instance-id" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(instanceID))
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *metadataService) requested() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.paths...)
}

// testShell is a shell on a fresh disk of a machine routed to metadataURL.
func testShell(t *testing.T, metadataURL string) (*shell, *testenv.SyncBuffer) {
	t.Helper()
	log := &testenv.SyncBuffer{}
	d, err := newDisk(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.installImage(ImageNode, ""); err != nil {
		t.Fatal(err)
	}
	m := &machine{cfg: MachineConfig{Name: "shell", MetadataURL: metadataURL}, log: newProgress(log, "shell")}
	return &shell{m: m, disk: d}, log
}

// TestCloudInitShell: the machine's shell runs scripts with its own curl and sed against
// its own disk, as a real machine's /bin/sh would.
func TestCloudInitShell(t *testing.T) {
	t.Parallel()
	md := newMetadataService(t, "4711")
	sh, _ := testShell(t, md.URL)
	if err := sh.disk.writeFiles([]cloudFile{{Path: "/etc/app/conf", Content: "id: @ID@ and @ID@\nname: x|y\n", Permissions: "0600"}}); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(sh.disk.real("/etc/app/conf", "/")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("written file: %v %v", info, err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name, script, wantOut, wantFile string
		wantStatus                      bool // whether the script fails
	}{
		{name: "curl from the metadata service", script: "curl -fsS http://169.254.169.254/hetzner/v1/metadata/instance-id", wantOut: "4711"},
		{name: "curl a wrong path fails at once", script: "curl -fsS --retry 30 --retry-delay 2 http://169.254.169.254/hetzner/v1/metadata/nope", wantStatus: true},
		{name: "curl elsewhere cannot connect", script: "curl -fsS http://10.0.0.1/x", wantStatus: true},
		{name: "sed the first match", script: "sed -i 's|@ID@|42|' /etc/app/conf", wantFile: "id: 42 and @ID@\nname: x|y\n"},
		{name: "sed everywhere with an escaped delimiter", script: `sed -i -e 's/x|y/x\/y/g' -e 's/@ID@/&&/g' /etc/app/conf`, wantFile: "id: 42 and @ID@@ID@\nname: x/y\n"},
		{name: "sed groups", script: `sed 's/\(id\): \([0-9]*\)/\2=\1/' /etc/app/conf`, wantOut: "42=id and @ID@@ID@\nname: x/y\n"},
		{name: "variables, case and redirection", script: "set -eu\nid=$(curl -fsS http://169.254.169.254/hetzner/v1/metadata/instance-id)\ncase \"$id\" in *[!0-9]*) exit 3 ;; esac\necho \"hcloud://$id\" > /run/pid\ncat /run/pid", wantOut: "hcloud://4711\n"},
		{name: "set -e stops at a failure", script: "set -e\ncurl -fsS http://169.254.169.254/missing\necho reached", wantStatus: true},
		{name: "nested sh -c", script: `sh -c 'echo "$1-$0"' zero one`, wantOut: "one-zero\n"},
		{name: "unknown commands are done", script: "modprobe br_netfilter && echo ok", wantOut: "ok\n"},
		{name: "rm", script: "rm -f /etc/app/conf /etc/app/none && cat /etc/app/conf", wantStatus: true},
	} {
		var out, errOut bytes.Buffer
		err := sh.run(ctx, tc.script, "test", nil, &out, &errOut, nil, nil)
		if (err != nil) != tc.wantStatus {
			t.Errorf("%s: err %v, want failure %v (stderr %q)", tc.name, err, tc.wantStatus, errOut.String())
		}
		if tc.wantOut != "" && out.String() != tc.wantOut {
			t.Errorf("%s: output %q, want %q", tc.name, out.String(), tc.wantOut)
		}
		if tc.wantFile != "" {
			got, _ := os.ReadFile(sh.disk.real("/etc/app/conf", "/"))
			if string(got) != tc.wantFile {
				t.Errorf("%s: file %q, want %q", tc.name, got, tc.wantFile)
			}
		}
	}
	// The disk is the machine's: paths cannot leave it.
	var out bytes.Buffer
	if err := sh.run(ctx, "echo escaped > ../../../../../tmp/outside-"+t.Name(), "test", nil, &out, &out, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/tmp/outside-" + t.Name()); err == nil {
		os.Remove("/tmp/outside-" + t.Name())
		t.Error("a script wrote outside the machine's disk")
	}
	if _, err := os.Stat(filepath.Join(sh.disk.root, "tmp", "outside-"+t.Name())); err != nil {
		t.Errorf("the write did not land on the machine's disk: %v", err)
	}
}

// TestRuncmdScript: runcmd entries become lines the way cloud-init makes them.
func TestRuncmdScript(t *testing.T) {
	t.Parallel()
	got, err := runcmdScript([]any{[]any{"kubeadm", "join", "--config", "/etc/a b.yaml"}, "echo $HOME", []any{"sh", "-c", "echo 'x'"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "kubeadm join --config '/etc/a b.yaml'\necho $HOME\nsh -c " + `'echo '\''x'\'''` + "\n"
	if got != want {
		t.Errorf("script %q, want %q", got, want)
	}
}

// hcloudJoinSpec is what the controller renders for a claim whose provider ID is not known
// before the machine exists.
func hcloudJoinSpec(t *testing.T, name string, tok bootstrap.Token, metadataURL string) bootstrap.JoinSpec {
	spec := joinSpec(t, name, tok)
	spec.ProviderID = ""
	spec.ProviderIDFrom = &bootstrap.ProviderIDSource{URL: metadataURL, Prefix: "hcloud://"}
	return spec
}

// TestMachineReadsProviderIDFromMetadata: a machine whose user data reads the instance ID
// from the metadata service registers with it; user data that reads a wrong path never
// joins; user data that does not read it at all registers without the ID.
func TestMachineReadsProviderIDFromMetadata(t *testing.T) {
	t.Parallel()
	md := newMetadataService(t, "4711")

	t.Run("instance id", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const name = "sim-metadata"
		dir := t.TempDir()
		spec := hcloudJoinSpec(t, name, mintToken(ctx, t, time.Now().Add(10*time.Minute)), v1alpha1.DefaultMetadataURL)
		run := startMachine(t, MachineConfig{Name: name, UserDataPath: writeUserData(t, dir, spec), MetadataURL: md.URL,
			StateDir: filepath.Join(dir, "state")})
		node := waitForNode(ctx, t, name, nodeReady)
		if node.Spec.ProviderID != "hcloud://4711" {
			t.Errorf("providerID = %q, want hcloud://4711", node.Spec.ProviderID)
		}
		if _, err := os.Stat(filepath.Join(dir, "state", "rootfs", bootstrap.JoinConfigPath)); err == nil {
			t.Error("the JoinConfiguration (with its token) is still on the machine's disk")
		}
		if err := run.powerOff(t); err != nil {
			t.Fatal(err)
		}
		// A reboot keeps the provider ID kubeadm registered with.
		rerun := startMachine(t, MachineConfig{Name: name, UserDataPath: filepath.Join(dir, "user-data"), MetadataURL: md.URL,
			StateDir: filepath.Join(dir, "state")})
		waitForLog(ctx, t, rerun.log, "exists already")
		if strings.Contains(rerun.log.String(), "cloud-init wrote") {
			t.Error("cloud-init ran again on a reboot")
		}
	})

	t.Run("wrong metadata path", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const name = "sim-metadata-wrong-path"
		dir := t.TempDir()
		spec := hcloudJoinSpec(t, name, mintToken(ctx, t, time.Now().Add(10*time.Minute)), "http://169.254.169.254/hetzner/v1/metadata/instanceid")
		run := startMachine(t, MachineConfig{Name: name, UserDataPath: writeUserData(t, dir, spec), MetadataURL: md.URL})
		err := run.wait(t, 30*time.Second)
		if err == nil || !strings.Contains(err.Error(), "kubeadm join never ran") || !strings.Contains(err.Error(), "curl: exit status 22") {
			t.Errorf("RunMachine = %v, want curl's failure and no kubeadm join", err)
		}
		if !strings.Contains(run.log.String(), "returned error: 404") {
			t.Errorf("the log does not show curl's 404:\n%s", run.log.String())
		}
	})

	t.Run("user data that does not read it", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const name = "sim-metadata-unread"
		dir := t.TempDir()
		spec := hcloudJoinSpec(t, name, mintToken(ctx, t, time.Now().Add(10*time.Minute)), v1alpha1.DefaultMetadataURL)
		data := renderUserData(t, spec)
		// The same user data with the join as a plain runcmd entry, no metadata step.
		cc, err := parseCloudConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		plain := "#cloud-config\nwrite_files:\n- path: " + bootstrap.JoinConfigPath + "\n  permissions: '0600'\n  content: |\n" +
			indent(cc.WriteFiles[0].Content, "    ") + "runcmd:\n- [kubeadm, join, --config, " + bootstrap.JoinConfigPath + "]\n"
		path := filepath.Join(dir, "user-data")
		if err := os.WriteFile(path, []byte(plain), 0o600); err != nil {
			t.Fatal(err)
		}
		own := newMetadataService(t, "4711") // the other subtests' machines ask md
		startMachine(t, MachineConfig{Name: name, UserDataPath: path, MetadataURL: own.URL})
		node := waitForNode(ctx, t, name, nodeReady)
		if node.Spec.ProviderID == "hcloud://4711" || !strings.Contains(node.Spec.ProviderID, bootstrap.InstanceIDPlaceholder) {
			t.Errorf("providerID = %q: the machine got an ID its user data never asked for", node.Spec.ProviderID)
		}
		if len(own.requested()) != 0 {
			t.Error("the machine asked the metadata service although its user data does not")
		}
	})
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if line != "" {
			b.WriteString(prefix + line)
		}
	}
	return b.String()
}

// TestAllocatableMatchesKarpenter: the Node a machine registers reports the allocatable
// that Karpenter computes for an instance type with the same overhead, because the user data
// passes the reservations to the kubelet; user data that does not pass them gives a Node
// that does not match, and reservations a kubelet refuses stop the machine.
func TestAllocatableMatchesKarpenter(t *testing.T) {
	t.Parallel()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("40Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	typeReservations := bootstrap.Reservations{
		KubeReserved:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		SystemReserved: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
		EvictionHard:   map[string]string{"memory.available": "200Mi", "nodefs.available": "7.5%"},
	}
	karpenter := (&cloudprovider.InstanceType{Capacity: capacity, Overhead: &cloudprovider.InstanceTypeOverhead{
		KubeReserved: typeReservations.KubeReserved, SystemReserved: typeReservations.SystemReserved,
		EvictionThreshold: typeReservations.EvictionThreshold(capacity),
	}}).Allocatable()

	for i, tc := range []struct {
		name         string
		reservations bootstrap.Reservations
		wantMatch    bool
		wantErr      string
	}{
		{name: "reservations passed", reservations: typeReservations, wantMatch: true},
		{name: "kube-reserved missing", reservations: bootstrap.Reservations{SystemReserved: typeReservations.SystemReserved, EvictionHard: typeReservations.EvictionHard}},
		{name: "kubelet defaults", reservations: bootstrap.Reservations{}},
		{name: "refused by the kubelet", reservations: bootstrap.Reservations{KubeReserved: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
			wantErr: `cannot reserve "nvidia.com/gpu"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			name := "sim-allocatable-" + string(rune('a'+i))
			spec := joinSpec(t, name, mintToken(ctx, t, time.Now().Add(10*time.Minute)))
			spec.Reservations = tc.reservations
			run := startMachine(t, MachineConfig{Name: name, UserDataPath: writeUserData(t, t.TempDir(), spec), Capacity: capacity})
			if tc.wantErr != "" {
				if err := run.wait(t, time.Minute); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("RunMachine = %v, want %q", err, tc.wantErr)
				}
				return
			}
			node := waitForNode(ctx, t, name, nodeReady)
			mismatch := allocatableMismatch(node.Status.Allocatable, karpenter)
			if tc.wantMatch && mismatch != "" {
				t.Errorf("the Node's allocatable differs from Karpenter's: %s", mismatch)
			}
			if !tc.wantMatch && mismatch == "" {
				t.Errorf("allocatable %v matches Karpenter's although the kubelet was told other reservations", node.Status.Allocatable)
			}
		})
	}
}

// allocatableMismatch describes how a Node's allocatable differs from Karpenter's, or "".
func allocatableMismatch(node, karpenter corev1.ResourceList) string {
	var diffs []string
	for name, want := range karpenter {
		if got, ok := node[name]; !ok || got.Cmp(want) != 0 {
			diffs = append(diffs, string(name)+": node "+got.String()+", karpenter "+want.String())
		}
	}
	return strings.Join(diffs, "; ")
}
