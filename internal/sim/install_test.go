// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/reportaccess"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// installShell is a shell on a fresh disk of image, with bootstrap's install.sh on it.
func installShell(t *testing.T, cfg MachineConfig) *shell {
	t.Helper()
	d, err := newDisk(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.installImage(cfg.Image, cfg.OS); err != nil {
		t.Fatal(err)
	}
	if err := d.writeFiles([]cloudFile{{Path: bootstrap.InstallScriptPath, Content: string(bootstrap.InstallScript), Permissions: "0755"}}); err != nil {
		t.Fatal(err)
	}
	cfg.Name = "installer"
	return &shell{m: &machine{cfg: cfg, log: newProgress(&testenv.SyncBuffer{}, "installer")}, disk: d}
}

// runInstall runs install.sh for a Kubernetes version on the machine; it returns its output
// and whether it succeeded.
func runInstall(ctx context.Context, t *testing.T, sh *shell, version string) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	err := sh.run(ctx, "KUBERNETES_VERSION="+version+" sh "+bootstrap.InstallScriptPath, "runcmd", nil, &out, &out, nil, nil)
	return out.String(), err == nil
}

func (sh *shell) read(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(sh.disk.real(p, "/"))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return string(data)
}

func (sh *shell) packageOps() int {
	sh.m.faultsMu.Lock()
	defer sh.m.faultsMu.Unlock()
	return sh.m.packageOps
}

// TestInstallOnStockImage runs install.sh through the machine's shell on a stock image of
// each supported operating system and architecture: it leaves kubelet, kubeadm and kubectl
// of the version asked for from the repository of its minor, containerd and runc of their
// releases for the machine's architecture, containerd configured with the systemd cgroup
// driver and kubeadm's pause image and running, swap off for good, and the kernel modules
// and sysctls. A second run (cloud-init run again) makes no package operation and changes
// nothing.
func TestInstallOnStockImage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ os, arch string }{{"ubuntu-24.04", "amd64"}, {"ubuntu-22.04", "arm64"}, {"debian-12", "amd64"}, {"debian-12", "arm64"}} {
		t.Run(tc.os+"/"+tc.arch, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sh := installShell(t, MachineConfig{Image: ImageStock, OS: tc.os, Arch: tc.arch})
			out, ok := runInstall(ctx, t, sh, "v1.36.3")
			if !ok {
				t.Fatalf("install.sh failed:\n%s", out)
			}
			for prog, want := range map[string]string{"kubeadm": "v1.36.3", "kubelet": "v1.36.3", "kubectl": "v1.36.3", "crictl": "v1.36.3",
				"containerd": ContainerdVersion, "runc": RuncVersion} {
				if v, _ := sh.disk.program(prog); v != want {
					t.Errorf("%s %q installed, want %q", prog, v, want)
				}
			}
			if !strings.Contains(sh.read(t, "/etc/apt/sources.list.d/kubernetes.list"), "https://pkgs.k8s.io/core:/stable:/v1.36/deb/ /") {
				t.Error("the repository of v1.36 is not configured")
			}
			config := sh.read(t, "/etc/containerd/config.toml")
			for _, want := range []string{"SystemdCgroup = true", "sandbox = 'registry.k8s.io/pause:3.10.2'"} {
				if !strings.Contains(config, want) {
					t.Errorf("containerd's configuration lacks %q:\n%s", want, config)
				}
			}
			if !strings.Contains(sh.read(t, "/etc/fstab"), "#/swap.img") {
				t.Error("swap is not turned off for good in /etc/fstab")
			}
			if !strings.Contains(sh.read(t, "/etc/sysctl.d/99-kubernetes.conf"), "net.ipv4.ip_forward = 1") ||
				!strings.Contains(sh.read(t, "/etc/modules-load.d/kubernetes.conf"), "br_netfilter") {
				t.Error("the sysctls or kernel modules are not set")
			}
			if _, err := os.Stat(sh.disk.real(unitsState+"/containerd.active", "/")); err != nil {
				t.Error("containerd is not running")
			}
			ops := sh.packageOps()
			t.Logf("%d package operations on a fresh %s %s image", ops, tc.os, tc.arch)
			if ops < 7 {
				t.Errorf("%d package operations, want an apt-get update and install and the downloads", ops)
			}
			files := snapshot(t, sh)
			if out, ok := runInstall(ctx, t, sh, "v1.36.3"); !ok {
				t.Fatalf("install.sh failed the second time:\n%s", out)
			}
			if again := sh.packageOps() - ops; again != 0 {
				t.Errorf("the second run made %d package operations", again)
			}
			if after := snapshot(t, sh); after != files {
				t.Errorf("the second run changed files:\nbefore %s\nafter  %s", files, after)
			}
		})
	}
}

// snapshot lists the disk's files outside /var/lib/fulfiller (install.sh's own record) and
// /run, with a digest of each.
func snapshot(t *testing.T, sh *shell) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range []string{"/etc", "/usr", "/opt"} {
		entries, err := os.ReadDir(sh.disk.real(dir, "/"))
		if err != nil {
			continue
		}
		for _, e := range entries {
			b.WriteString(dir + "/" + e.Name() + " ")
		}
	}
	for _, p := range []string{"/etc/containerd/config.toml", "/etc/fstab", "/etc/apt/sources.list.d/kubernetes.list", "/usr/bin/kubeadm"} {
		b.WriteString(p + "=" + sh.read(t, p))
	}
	return b.String()
}

// TestInstallFails: a failing step stops install.sh with the step and the failing command's
// last line in its failure record, as boot.sh reports them; a transient failure is retried
// and passes.
func TestInstallFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      MachineConfig
		version  string
		step     string
		message  string
		attempts int
	}{
		{name: "repository unavailable", cfg: MachineConfig{Image: ImageStock, PackageFault: &PackageFault{Command: "apt-get install"}},
			step: "kubernetes-packages", message: "E: Failed to fetch https://pkgs.k8s.io/", attempts: 4},
		{name: "no such release", cfg: MachineConfig{Image: ImageStock, PackageFault: &PackageFault{Command: "curl containerd-2.1.4-linux-amd64.tar.gz",
			Message: "curl: (22) The requested URL returned error: 404"}}, step: "containerd", message: "returned error", attempts: 4},
		{name: "no such version", cfg: MachineConfig{Image: ImageStock}, version: "v1.36.12", step: "kubernetes-packages",
			message: "the repository https://pkgs.k8s.io/core:/stable:/v1.36/deb/ has no kubeadm 1.36.12"},
		{name: "unsupported system", cfg: MachineConfig{Image: ImageStock, OS: "rocky-9"}, step: "os",
			message: "unsupported operating system Rocky Linux 9.4 (Blue Onyx)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sh := installShell(t, tc.cfg)
			out, ok := runInstall(ctx, t, sh, cmpOr(tc.version, "v1.36.3"))
			if ok {
				t.Fatalf("install.sh succeeded:\n%s", out)
			}
			failure := strings.SplitN(sh.read(t, "/var/lib/fulfiller/failure"), "\n", 2)
			if failure[0] != tc.step || !strings.Contains(failure[1], tc.message) {
				t.Errorf("failure %q, want step %s with %q\n%s", failure, tc.step, tc.message, out)
			}
			if tc.attempts > 0 && sh.m.faults != tc.attempts {
				t.Errorf("%d attempts, want %d (FULFILLER_RETRIES)", sh.m.faults, tc.attempts)
			}
		})
	}

	t.Run("transient", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sh := installShell(t, MachineConfig{Image: ImageStock, PackageFault: &PackageFault{Command: "apt-get install", Times: 1}})
		out, ok := runInstall(ctx, t, sh, "v1.36.3")
		if !ok {
			t.Fatalf("install.sh did not get past one failed download:\n%s", out)
		}
		if !strings.Contains(out, "retrying in 2s") {
			t.Errorf("install.sh did not say it retries:\n%s", out)
		}
	})
}

// TestInstallOnNodeImage: on an image that has the node software of the version (what
// images/ bakes with the same script), install.sh makes no package operation.
func TestInstallOnNodeImage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh := installShell(t, MachineConfig{Image: ImageNode})
	if out, ok := runInstall(ctx, t, sh, KubeletVersion); !ok {
		t.Fatalf("install.sh failed:\n%s", out)
	}
	if ops := sh.packageOps(); ops != 0 {
		t.Errorf("%d package operations on an image that has everything", ops)
	}
}

const reportNamespace = "fulfiller"

var reportAccess sync.Once

// reportingSpec is what the controller renders for a claim whose class installs the node
// software (or not) and whose machine reports to its BootReport: the token of the report
// group, the BootReport naming it, the RBAC and admission policy that let it report.
func reportingSpec(ctx context.Context, t *testing.T, name string, install bootstrap.Install) bootstrap.JoinSpec {
	t.Helper()
	c, err := client.New(controlPlane.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reportAccess.Do(func() {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: reportNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		for _, obj := range reportaccess.Objects(reportNamespace, "fulfiller-boot-report") {
			if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	})
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	secret := bootstrap.TokenSecret(tok, bootstrap.TokenSecretOptions{Expires: time.Now().Add(10 * time.Minute), Description: "sim " + t.Name(),
		Groups: []string{bootstrap.DefaultGroup, bootstrap.ReportGroup}})
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &v1alpha1.BootReport{ObjectMeta: metav1.ObjectMeta{Namespace: reportNamespace, Name: name}, Spec: v1alpha1.BootReportSpec{TokenID: tok.ID}}); err != nil {
		t.Fatal(err)
	}
	spec := joinSpec(t, name, tok)
	spec.Install = install
	spec.CRISocket = "unix:///run/containerd/containerd.sock"
	spec.Report = &bootstrap.Report{URL: bootstrap.ReportURL(spec.APIServerEndpoint, v1alpha1.Group, "v1alpha1", reportNamespace, name), CAPEM: controlPlane.CAPEM}
	return spec
}

func bootReport(ctx context.Context, t *testing.T, name string) v1alpha1.BootReportStatus {
	t.Helper()
	c, err := client.New(controlPlane.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &v1alpha1.BootReport{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: reportNamespace, Name: name}, r); err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// TestStockMachineBoots boots machines from the user data the controller renders, its boot
// and install scripts run by the machine's shell with its simulated package tools, its
// reports sent to the real API server with the claim's token (real bootstrap-token
// authentication, RBAC and admission policy): a stock image installs the node software,
// reports Installing and Joining and joins; an install that fails halfway reports the step
// and the line and never joins; a class that expects a pre-baked image on a stock one
// reports that kubeadm is not there.
func TestStockMachineBoots(t *testing.T) {
	t.Parallel()
	packages := bootstrap.Install{Packages: true, KubernetesVersion: "v1.36.3"}
	for _, tc := range []struct {
		name    string
		install bootstrap.Install
		cfg     MachineConfig
		joins   bool
		report  v1alpha1.BootReportStatus
		message string
	}{
		{name: "sim-stock-installs", install: packages, cfg: MachineConfig{Image: ImageStock, PackageDelay: 20 * time.Millisecond}, joins: true,
			report: v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageJoining, Step: "join"}},
		{name: "sim-stock-install-fails", install: packages, cfg: MachineConfig{Image: ImageStock, PackageFault: &PackageFault{Command: "apt-get install"}},
			report:  v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageFailed, Step: "kubernetes-packages"},
			message: "apt_get exited with status 100 (E: Failed to fetch https://pkgs.k8s.io/core:/stable:/v1.36/deb/amd64/kubelet_1.36.3-1.1_amd64.deb"},
		{name: "sim-stock-no-kubeadm", cfg: MachineConfig{Image: ImageStock},
			report:  v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageFailed, Step: "join"},
			message: "kubeadm join exited with status 127: sh: 1: kubeadm: not found"},
		{name: "sim-node-image", install: packages, cfg: MachineConfig{Image: ImageNode}, joins: true,
			report: v1alpha1.BootReportStatus{Stage: v1alpha1.BootStageJoining, Step: "join"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dir := t.TempDir()
			cfg := tc.cfg
			cfg.Name, cfg.UserDataPath, cfg.StateDir = tc.name, writeUserData(t, dir, reportingSpec(ctx, t, tc.name, tc.install)), filepath.Join(dir, "state")
			run := startMachine(t, cfg)
			if tc.joins {
				waitForNode(ctx, t, tc.name, nodeReady)
			} else if err := run.wait(t, time.Minute); err == nil {
				t.Fatalf("the machine joined:\n%s", run.log.String())
			}
			got := bootReport(ctx, t, tc.name)
			if got.Stage != tc.report.Stage || got.Step != tc.report.Step || !strings.Contains(got.Message, tc.message) {
				t.Errorf("BootReport status %+v, want %+v with %q\n%s", got, tc.report, tc.message, run.log.String())
			}
			for _, p := range []string{bootstrap.JoinConfigPath, bootstrap.ReportAuthPath} {
				if _, err := os.Stat(filepath.Join(dir, "state", "rootfs", p)); err == nil {
					t.Errorf("%s, which holds the token, is left on the machine's disk", p)
				}
			}
		})
	}
}
