// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"context"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/testenv"
)

// An OCI module package in a registry on loopback (go-containerregistry's, over TLS with a
// certificate the fetch trusts through SSL_CERT_FILE) is fetched by tofu.
func TestFetchModuleOCI(t *testing.T) {
	reg := testenv.NewOCIRegistry(t)
	reg.PushModule(moduleDir(t, "node"), "modules/node", "v1")
	env := fetchEnv(t)
	env["SSL_CERT_FILE"] = reg.CAFile
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := FetchModule(ctx, tofuPath(t), "oci://"+reg.Host+"/modules/node?tag=v1", "", t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ModuleDigest(moduleDir(t, "node"))
	if got.Digest != want {
		t.Errorf("the OCI package resolved to %+v, want the module's digest %s", got, want)
	}
}
