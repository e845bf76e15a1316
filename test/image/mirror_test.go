// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package image

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// TestNetworkMirror: with the chart's tofu.cliConfig naming the image's mirror first and then
// a provider network mirror, `tofu init` in the image installs a provider the image lacks from
// the network mirror and the shipped modules' provider from the image, reaching nothing but
// the mirror's address. The CLI configuration is the one `helm template` renders from the
// chart, at the path the chart mounts it; the network mirror follows tofu's provider network
// mirror protocol, served over HTTPS with a CA the run is given through SSL_CERT_FILE.
//
// The provider only the network mirror has is the image's hetznercloud/hcloud binary under
// another address (fulfiller-test/hcloud): tofu installs and starts a provider by its address
// and type, whatever its binary's origin.
func TestNetworkMirror(t *testing.T) {
	fs := rootfs(t)
	const source = "registry.opentofu.org/hetznercloud/hcloud"
	version := pins[source]
	if version == "" {
		t.Fatalf("no shipped module pins %s: pick another provider for this test", source)
	}

	// The network mirror (tofu's provider network mirror protocol): the provider's index of
	// versions, the version's archives, and the archive, a zip of the image's hcloud binary
	// under the new address.
	served := t.TempDir()
	dir := filepath.Join(served, "registry.opentofu.org", "fulfiller-test", "hcloud")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	binary := "terraform-provider-hcloud_v" + version
	exe, err := os.ReadFile(filepath.Join(fs, "opt", "tofu", "providers", source, version, "linux_amd64", binary))
	if err != nil {
		t.Fatal(err)
	}
	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	hdr := &zip.FileHeader{Name: binary, Method: zip.Deflate}
	hdr.SetMode(0o755)
	w, err := zw.CreateHeader(hdr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(exe); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zipName := "terraform-provider-hcloud_" + version + "_linux_amd64.zip"
	sum := sha256.Sum256(zipped.Bytes())
	for name, content := range map[string][]byte{
		zipName:           zipped.Bytes(),
		"index.json":      []byte(`{"versions":{"` + version + `":{}}}`),
		version + ".json": []byte(`{"archives":{"linux_amd64":{"url":"` + zipName + `","hashes":["zh:` + hex.EncodeToString(sum[:]) + `"]}}}`),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var requests []string
	files := http.FileServer(http.Dir(served))
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.URL.Path)
		mu.Unlock()
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(fs, "tmp", "mirror-ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}

	// The chart's CLI configuration, as helm renders it, where the chart mounts it.
	values := filepath.Join(t.TempDir(), "cliconfig.hcl")
	if err := os.WriteFile(values, []byte(`provider_installation {
  filesystem_mirror {
    path    = "/opt/tofu/providers"
    include = ["*/*/*"]
  }
  network_mirror {
    url     = "`+server.URL+`/"
    include = ["*/*/*"]
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cliConfig := renderCLIConfig(t, values)
	const mounted = "/etc/fulfiller/cli-config/tofurc"
	if err := os.MkdirAll(filepath.Join(fs, filepath.Dir(mounted)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fs, mounted), []byte(cliConfig), 0o644); err != nil {
		t.Fatal(err)
	}

	// A module needing both providers, initialised in the image as a runner does.
	uid, gid := imageUser()
	work := filepath.Join(fs, "tmp", "network-mirror")
	writeModule(t, work, map[string]string{"shipped": "hetznercloud/hcloud", "extra": "fulfiller-test/hcloud"}, version)
	if err := chownTree(work, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	addr, err := url.Parse(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	ns := newNetNS(t, addr.Host)
	var log testenv.SyncBuffer
	cmd := imageCmd(fs, "/tmp/network-mirror", []string{"TF_CLI_CONFIG_FILE=" + mounted, "SSL_CERT_FILE=/tmp/mirror-ca.pem"},
		"/usr/local/bin/tofu", "init", "-input=false", "-backend=false", "-no-color")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := ns.start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tofu init in the image with the chart's CLI configuration: %v\n%s", err, log.String())
	}
	lock, err := os.ReadFile(filepath.Join(work, ".terraform.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{source, "registry.opentofu.org/fulfiller-test/hcloud"} {
		if !strings.Contains(string(lock), `provider "`+p+`"`) {
			t.Errorf("the lock file names no %s:\n%s", p, lock)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	archive := "/registry.opentofu.org/fulfiller-test/hcloud/terraform-provider-hcloud_" + version + "_linux_amd64.zip"
	if !slices.Contains(requests, archive) {
		t.Errorf("the network mirror served %v, not the provider only it has (%s)", requests, archive)
	}
	for _, r := range requests {
		if strings.Contains(r, "/hetznercloud/") && strings.HasSuffix(r, ".zip") {
			t.Errorf("the shipped modules' provider was downloaded from the network mirror (%s), not taken from the image", r)
		}
	}
}

// renderCLIConfig renders the chart with tofu.cliConfig from file and returns the ConfigMap's
// tofurc.
func renderCLIConfig(t *testing.T, file string) string {
	t.Helper()
	out := helmTemplate(t, "templates/tofu-cli-config.yaml", "--set-file", "tofu.cliConfig="+file)
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(out, &cm); err != nil {
		t.Fatalf("the chart's tofu CLI configuration ConfigMap: %v\n%s", err, out)
	}
	if cm.Data["tofurc"] == "" {
		t.Fatalf("the chart's ConfigMap has no tofurc:\n%s", out)
	}
	return cm.Data["tofurc"]
}

// helmTemplate is the chart's template file rendered by the pinned helm for a release in
// namespace fulfiller, with its own helm folders and extra arguments.
func helmTemplate(t *testing.T, template string, args ...string) []byte {
	t.Helper()
	helm, err := testenv.Tool("helm")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, append([]string{"template", "fulfiller", filepath.Join(root, "charts", "fulfiller"), "--namespace", "fulfiller",
		"--set", "settings.clusterName=image-test", "--show-only", template}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	return out
}

// writeModule writes a module to dir that requires each provider (local name → source) at
// version.
func writeModule(t *testing.T, dir string, providers map[string]string, version string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("terraform {\n  required_providers {\n")
	for _, name := range slices.Sorted(maps.Keys(providers)) {
		b.WriteString("    " + name + ` = { source = "` + providers[name] + `", version = "` + version + "\" }\n")
	}
	b.WriteString("  }\n}\n")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
