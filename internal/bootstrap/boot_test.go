// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// curlStub answers the boot script's two kinds of requests: a PATCH is a progress report,
// appended to $REPORTS (its Authorization header file is read, as curl reads -H @file); a GET
// reads the instance ID from the metadata service, as $METADATA says.
const curlStub = `#!/bin/sh
method=GET data='' auth=''
while [ $# -gt 0 ]; do
  case $1 in
    -X) method=$2; shift ;;
    --data) data=$2; shift ;;
    -H) case $2 in @*) auth=$(cat "${2#@}") ;; esac; shift ;;
    -o | --retry | --retry-delay | --connect-timeout | --max-time | --cacert) shift ;;
  esac
  shift
done
if [ "$method" = PATCH ]; then
  [ "$REPORT_STATUS" = 0 ] || { echo "curl: (7) Failed to connect" >&2; exit "$REPORT_STATUS"; }
  printf '%s %s\n' "${auth#Authorization: Bearer }" "$data" >>"$REPORTS"
  exit 0
fi
eval "$METADATA"
`

// kubeadmStub keeps the JoinConfiguration it was given and says and exits as $KUBEADM says.
const kubeadmStub = `#!/bin/sh
[ "$1 $2" = "join --config" ] || { echo "unexpected kubeadm $*" >&2; exit 2; }
cp "$3" "$JOINED"
eval "$KUBEADM"
`

type bootReport struct {
	Token  string
	Status struct{ Stage, Step, Message string }
}

// TestBootScript runs boot.sh with /bin/sh (dash on Debian and Ubuntu) and this machine's
// sed, cut and tr, with curl, kubeadm and install.sh stand-ins, on the settings the user data
// writes: it reports each stage with the claim's token, installs before it joins, writes the
// instance ID into the JoinConfiguration, reports a failed step with its line and stops
// before `kubeadm join`, leaves a joined machine alone, and always removes the token's files.
func TestBootScript(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec      func(*JoinSpec)
		install   string // install.sh stand-in
		metadata  string
		kubeadm   string
		joined    bool // kubelet.conf exists before
		reportRC  string
		wantJoin  bool
		wantID    string
		wantExit  int
		reports   []string // stage/step
		wantError string   // the Failed report's message
	}{
		{name: "image has everything", wantJoin: true, wantID: "sim://node-a", reports: []string{"Joining/join"}},
		{name: "installs then joins", spec: packages, install: "echo installed", wantJoin: true, wantID: "sim://node-a",
			reports: []string{"Installing/install", "Joining/join"}},
		{name: "install fails", spec: packages, wantExit: 1,
			install:   `printf 'kubernetes-packages\napt_get exited with status 100 (E: Unable to locate package kubelet)\n' >"$FULFILLER_STATE/failure"; exit 1`,
			reports:   []string{"Installing/install", "Failed/kubernetes-packages"},
			wantError: "apt_get exited with status 100 (E: Unable to locate package kubelet)"},
		{name: "install dies without a word", spec: packages, wantExit: 1, install: "echo 'Segmentation fault'; exit 139",
			reports: []string{"Installing/install", "Failed/install"}, wantError: "Segmentation fault"},
		{name: "message is escaped", spec: packages, wantExit: 1,
			install:   `printf 'containerd\nsaid "no" to C:\\tmp\tnow\n' >"$FULFILLER_STATE/failure"; exit 1`,
			reports:   []string{"Installing/install", "Failed/containerd"},
			wantError: `said "no" to C:\tmpnow`},
		{name: "provider id from metadata", spec: fromMetadata, metadata: "echo 4711", wantJoin: true, wantID: "hcloud://4711", reports: []string{"Joining/join"}},
		{name: "metadata not found", spec: fromMetadata, wantExit: 1,
			metadata: "echo 'curl: (22) The requested URL returned error: 404' >&2; exit 22",
			reports:  []string{"Joining/join", "Failed/provider-id"}, wantError: "The requested URL returned error: 404"},
		{name: "unusable instance id", spec: fromMetadata, metadata: "echo '47 11'", wantExit: 1,
			reports: []string{"Joining/join", "Failed/provider-id"}, wantError: "unusable instance ID '47 11'"},
		{name: "kubeadm fails its preflight", wantExit: 1, wantJoin: true, wantID: "sim://node-a",
			kubeadm:   `printf '[preflight] Running pre-flight checks\nerror execution phase preflight: [preflight] Some fatal errors occurred:\n\t[ERROR FileContent--proc-sys-net-ipv4-ip_forward]: /proc/sys/net/ipv4/ip_forward contents are not set to 1\n[preflight] If you know what you are doing, you can make a check non-fatal with --ignore-preflight-errors=...\nTo see the stack trace of this error execute with --v=5 or higher\n' >&2; exit 1`,
			reports:   []string{"Joining/join", "Failed/join"},
			wantError: "kubeadm join exited with status 1: [ERROR FileContent--proc-sys-net-ipv4-ip_forward]: /proc/sys/net/ipv4/ip_forward contents are not set to 1"},
		{name: "kubeadm not installed", wantExit: 1, kubeadm: `echo "sh: 1: kubeadm: not found" >&2; exit 127`, wantJoin: true, wantID: "sim://node-a",
			reports: []string{"Joining/join", "Failed/join"}, wantError: "kubeadm join exited with status 127: sh: 1: kubeadm: not found"},
		{name: "reports unreachable", reportRC: "7", wantJoin: true, wantID: "sim://node-a"},
		{name: "joined already", joined: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec(t)
			spec.Report = &Report{URL: "https://10.0.0.2:6443/apis/fulfiller.sh/v1alpha1/namespaces/fulfiller/bootreports/node-a/status", CAPEM: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}
			if tc.spec != nil {
				tc.spec(&spec)
			}
			data, err := RenderUserData(spec)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			at := func(p string) string { return filepath.Join(dir, "root", p) }
			write := func(path, content string, mode os.FileMode) {
				t.Helper()
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), mode); err != nil {
					t.Fatal(err)
				}
			}
			// cloud-init's write_files, into the test's root.
			for _, f := range mustCloudConfig(t, data).WriteFiles {
				content := f.Content
				if f.Path == BootEnvPath {
					for _, p := range ourPaths {
						content = strings.ReplaceAll(content, "'"+p+"'", "'"+at(p)+"'")
					}
				}
				write(at(f.Path), content, 0o600)
			}
			bin := filepath.Join(dir, "bin")
			write(filepath.Join(bin, "curl"), curlStub, 0o755)
			write(filepath.Join(bin, "kubeadm"), kubeadmStub, 0o755)
			write(at(InstallScriptPath), "#!/bin/sh\n"+tc.install+"\n", 0o755)
			kubeletConf := at("/etc/kubernetes/kubelet.conf")
			if tc.joined {
				write(kubeletConf, "joined", 0o600)
			}
			reports, joined := filepath.Join(dir, "reports"), filepath.Join(dir, "joined.yaml")
			cmd := exec.Command("/bin/sh", at(BootScriptPath))
			cmd.Env = []string{
				"PATH=" + bin + ":/usr/bin:/bin",
				"FULFILLER_BOOT_ENV=" + at(BootEnvPath), "FULFILLER_STATE=" + at("/var/lib/fulfiller"),
				"FULFILLER_INSTALL_SCRIPT=" + at(InstallScriptPath), "FULFILLER_KUBELET_KUBECONFIG=" + kubeletConf,
				"REPORTS=" + reports, "JOINED=" + joined, "METADATA=" + tc.metadata, "KUBEADM=" + tc.kubeadm,
				"REPORT_STATUS=" + cmpOr(tc.reportRC, "0"),
			}
			out, err := cmd.CombinedOutput()
			exit := 0
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				exit = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if exit != tc.wantExit {
				t.Fatalf("boot.sh exited %d, want %d:\n%s", exit, tc.wantExit, out)
			}
			for _, p := range []string{JoinConfigPath, ReportAuthPath} {
				if _, err := os.Stat(at(p)); !os.IsNotExist(err) {
					t.Errorf("%s, which holds the token, is left on the machine", p)
				}
			}
			got, readErr := os.ReadFile(joined)
			if ran := readErr == nil; ran != tc.wantJoin {
				t.Fatalf("kubeadm join ran: %t, want %t:\n%s", ran, tc.wantJoin, out)
			}
			if tc.wantJoin {
				var jc JoinConfiguration
				if err := yaml.UnmarshalStrict(got, &jc); err != nil {
					t.Fatal(err)
				}
				if id, _ := jc.NodeRegistration.Arg("provider-id"); id != tc.wantID {
					t.Errorf("kubeadm joined with provider-id %q, want %q", id, tc.wantID)
				}
			}
			var stages []string
			var failure string
			lines, _ := os.ReadFile(reports)
			for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
				if line == "" {
					continue
				}
				token, body, _ := strings.Cut(line, " ")
				if token != spec.Token.String() {
					t.Errorf("a report is sent with another token than the claim's")
				}
				var r bootReport
				if err := json.Unmarshal([]byte(body), &r); err != nil {
					t.Fatalf("report %q is no JSON: %v", body, err)
				}
				stages = append(stages, r.Status.Stage+"/"+r.Status.Step)
				if r.Status.Stage == v1alpha1.BootStageFailed {
					failure = r.Status.Message
				}
			}
			if strings.Join(stages, ",") != strings.Join(tc.reports, ",") {
				t.Errorf("reports %v, want %v\n%s", stages, tc.reports, out)
			}
			if tc.wantError != "" && !strings.Contains(failure, tc.wantError) {
				t.Errorf("failure reported as %q, want %q", failure, tc.wantError)
			}
		})
	}
}

func packages(s *JoinSpec) { s.Install = Install{Packages: true, KubernetesVersion: "v1.36.3"} }

func fromMetadata(s *JoinSpec) {
	s.ProviderIDFrom = &ProviderIDSource{URL: v1alpha1.DefaultMetadataURL, Prefix: v1alpha1.DefaultProviderIDPrefix}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
