// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// pushOCIModule zips the module folder dir and pushes it to the registry at base as an
// OpenTofu module package (an image manifest of artifact type
// application/vnd.opentofu.modulepkg with one archive/zip layer), tagged tag.
func pushOCIModule(t *testing.T, client *http.Client, base, repo, tag, dir string) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		w, err := zw.Create(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, url, contentType string, body []byte) {
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %s", method, url, res.Status)
		}
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	empty := []byte("{}")
	for _, blob := range [][]byte{buf.Bytes(), empty} {
		send(http.MethodPost, fmt.Sprintf("%s/v2/%s/blobs/uploads/?digest=%s", base, repo, digest(blob)), "application/octet-stream", blob)
	}
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"artifactType":  "application/vnd.opentofu.modulepkg",
		"config":        map[string]any{"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest(empty), "size": len(empty)},
		"layers":        []any{map[string]any{"mediaType": "archive/zip", "digest": digest(buf.Bytes()), "size": buf.Len()}},
	})
	send(http.MethodPut, fmt.Sprintf("%s/v2/%s/manifests/%s", base, repo, tag), "application/vnd.oci.image.manifest.v1+json", manifest)
}

// An OCI module package in a registry on loopback (go-containerregistry's, over TLS with a
// certificate the fetch trusts through SSL_CERT_FILE) is fetched by tofu.
func TestFetchModuleOCI(t *testing.T) {
	srv := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	pushOCIModule(t, srv.Client(), srv.URL, "modules/node", "v1", moduleDir(t, "node"))
	env := fetchEnv(t)
	env["SSL_CERT_FILE"] = ca
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	source := "oci://" + strings.TrimPrefix(srv.URL, "https://") + "/modules/node?tag=v1"
	got, err := FetchModule(ctx, tofuPath(t), source, t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ModuleDigest(moduleDir(t, "node"))
	if got.Digest != want {
		t.Errorf("the OCI package resolved to %+v, want the module's digest %s", got, want)
	}
}
