// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"encoding/pem"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// ModuleRegistry is a module registry as OpenTofu's module registry protocol describes one,
// served over HTTPS on loopback until the test ends: service discovery
// (/.well-known/terraform.json naming modules.v1), a module's versions
// (GET <base>/<namespace>/<name>/<system>/versions) and a version's download (GET
// .../<version>/download, answered 204 with X-Terraform-Get naming a .tar.gz archive it also
// serves). Its certificate is httptest's own for 127.0.0.1, as NewOCIRegistry's (CAFile: point
// SSL_CERT_FILE at it): tofu takes a registry host only with a dot in it, so
// localhost is not one. With a token, the registry's API answers 401 to a request without
// "Authorization: Bearer <token>" (tofu sends it from TF_TOKEN_<host>, TokenEnv); the
// archives need none, as tofu fetches them without the registry's credentials.
type ModuleRegistry struct {
	t testing.TB
	// Host is the registry's host:port, the first part of its modules' source addresses.
	Host string
	// CAFile holds the server's certificate (PEM).
	CAFile string
	token  string
	srv    *httptest.Server

	mu       sync.Mutex
	modules  map[string]map[string][]byte // namespace/name/system → version → archive
	requests []RegistryRequest
}

// RegistryRequest is a request the registry answered.
type RegistryRequest struct {
	Path string
	// Authorized: it carried the registry's token (always false without a token).
	Authorized bool
	Status     int
}

// NewModuleRegistry starts a registry; a token other than "" is required by its API.
func NewModuleRegistry(t testing.TB, token string) *ModuleRegistry {
	t.Helper()
	r := &ModuleRegistry{t: t, token: token, modules: map[string]map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/terraform.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"modules.v1":"/v1/modules/"}`))
	})
	mux.HandleFunc("GET /v1/modules/{namespace}/{name}/{system}/versions", r.versions)
	mux.HandleFunc("GET /v1/modules/{namespace}/{name}/{system}/{version}/download", r.download)
	mux.HandleFunc("GET /archives/{namespace}/{name}/{system}/{archive}", r.archive)
	r.srv = httptest.NewTLSServer(r.record(mux))
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "https://")
	r.CAFile = filepath.Join(t.TempDir(), "module-registry-ca.pem")
	if err := os.WriteFile(r.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// Source is the source address of a module (namespace/name/system) on this registry.
func (r *ModuleRegistry) Source(module string) string {
	return r.Host + "/" + module
}

// TokenEnv is the variable that gives tofu the registry's token: TF_TOKEN_ and the host, its
// dots as underscores (127_0_0_1:PORT).
func (r *ModuleRegistry) TokenEnv() string {
	return "TF_TOKEN_" + strings.ReplaceAll(r.Host, ".", "_")
}

// Publish packs the module folder dir (hidden files left out) as version of module
// (namespace/name/system).
func (r *ModuleRegistry) Publish(dir, module, version string) {
	r.t.Helper()
	archive, err := tarGz(dir)
	if err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.modules[module] == nil {
		r.modules[module] = map[string][]byte{}
	}
	r.modules[module][version] = archive
}

// Requests are the requests answered so far whose path starts with prefix.
func (r *ModuleRegistry) Requests(prefix string) []RegistryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RegistryRequest
	for _, q := range r.requests {
		if strings.HasPrefix(q.Path, prefix) {
			out = append(out, q)
		}
	}
	return out
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (r *ModuleRegistry) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, req)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.requests = append(r.requests, RegistryRequest{Path: req.URL.Path, Authorized: r.authorized(req), Status: sw.status})
	})
}

func (r *ModuleRegistry) authorized(req *http.Request) bool {
	return r.token != "" && req.Header.Get("Authorization") == "Bearer "+r.token
}

// module is the published versions of the request's module, or nil after an error answer.
func (r *ModuleRegistry) module(w http.ResponseWriter, req *http.Request) map[string][]byte {
	if r.token != "" && !r.authorized(req) {
		http.Error(w, `{"errors":["not authorized"]}`, http.StatusUnauthorized)
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	versions := r.modules[req.PathValue("namespace")+"/"+req.PathValue("name")+"/"+req.PathValue("system")]
	if versions == nil {
		http.Error(w, `{"errors":["not found"]}`, http.StatusNotFound)
	}
	return versions
}

func (r *ModuleRegistry) versions(w http.ResponseWriter, req *http.Request) {
	published := r.module(w, req)
	if published == nil {
		return
	}
	type version struct {
		Version string `json:"version"`
	}
	var list []version
	for _, v := range slices.Sorted(maps.Keys(published)) {
		list = append(list, version{v})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"modules": []any{map[string]any{"versions": list}}})
}

func (r *ModuleRegistry) download(w http.ResponseWriter, req *http.Request) {
	published := r.module(w, req)
	if published == nil {
		return
	}
	v := req.PathValue("version")
	if _, ok := published[v]; !ok {
		http.Error(w, `{"errors":["no such version"]}`, http.StatusNotFound)
		return
	}
	w.Header().Set("X-Terraform-Get", r.srv.URL+"/archives/"+req.PathValue("namespace")+"/"+req.PathValue("name")+"/"+req.PathValue("system")+"/"+v+".tar.gz")
	w.WriteHeader(http.StatusNoContent)
}

func (r *ModuleRegistry) archive(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	data, ok := r.modules[req.PathValue("namespace")+"/"+req.PathValue("name")+"/"+req.PathValue("system")][strings.TrimSuffix(req.PathValue("archive"), ".tar.gz")]
	r.mu.Unlock()
	if !ok {
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = w.Write(data)
}

// tarGz is the files of dir (hidden ones left out) as a gzipped tar archive.
func tarGz(dir string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(hdr); err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	for _, c := range []interface{ Close() error }{tw, zw} {
		if err == nil {
			err = c.Close()
		}
	}
	return buf.Bytes(), err
}
