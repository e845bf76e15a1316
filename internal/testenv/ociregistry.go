// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"archive/zip"
	"bytes"
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

	"github.com/google/go-containerregistry/pkg/registry"
)

// OCIRegistry is go-containerregistry's in-memory OCI registry, served over TLS on loopback
// until the test ends, for module sources oci://<Host>/<repository>?tag=<tag>.
type OCIRegistry struct {
	t testing.TB
	// Host is the registry's host:port.
	Host string
	// CAFile holds the server's certificate (PEM): point SSL_CERT_FILE at it to trust it.
	CAFile string
	srv    *httptest.Server
}

// NewOCIRegistry starts a registry.
func NewOCIRegistry(t testing.TB) *OCIRegistry {
	t.Helper()
	srv := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "oci-registry-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &OCIRegistry{t: t, Host: strings.TrimPrefix(srv.URL, "https://"), CAFile: ca, srv: srv}
}

// PushModule zips the module folder dir (hidden files left out) and pushes it as an
// OpenTofu module package: an image manifest of artifact type
// application/vnd.opentofu.modulepkg with one archive/zip layer, tagged tag in repo.
func (r *OCIRegistry) PushModule(dir, repo, tag string) {
	r.t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
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
		r.t.Fatal(err)
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	empty := []byte("{}")
	for _, blob := range [][]byte{buf.Bytes(), empty} {
		r.send(http.MethodPost, fmt.Sprintf("/v2/%s/blobs/uploads/?digest=%s", repo, digest(blob)), "application/octet-stream", blob)
	}
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"artifactType":  "application/vnd.opentofu.modulepkg",
		"config":        map[string]any{"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest(empty), "size": len(empty)},
		"layers":        []any{map[string]any{"mediaType": "archive/zip", "digest": digest(buf.Bytes()), "size": buf.Len()}},
	})
	r.send(http.MethodPut, fmt.Sprintf("/v2/%s/manifests/%s", repo, tag), "application/vnd.oci.image.manifest.v1+json", manifest)
}

func (r *OCIRegistry) send(method, path, contentType string, body []byte) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	res, err := r.srv.Client().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode/100 != 2 {
		r.t.Fatalf("%s %s: %s", method, path, res.Status)
	}
}
