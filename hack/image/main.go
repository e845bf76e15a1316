// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Command image builds the fulfiller's container image without a container engine (`make
// image`): an OCI image index for linux/amd64 and linux/arm64 written as an OCI layout, a
// tarball per platform that `docker load` reads, and a CycloneDX SBOM per platform. Every
// file comes from a pinned source: the fulfiller built here from the repository, tofu and the
// providers the shipped modules pin built from source by hack/tools.sh (for each
// architecture), the shipped modules, the CA certificates of a pinned Go module. No base
// image is pulled. Files, layers and configuration carry SOURCE_DATE_EPOCH as their time,
// so the same inputs give the same digests. docs/image.md describes the result.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.root, "root", "", "the repository (required)")
	flag.StringVar(&o.out, "out", "", "the output folder (required); its previous content is replaced")
	flag.StringVar(&o.tools, "tools", "", "hack/tools.sh's tools folder ($FULFILLER_CACHE/tools; required)")
	flag.StringVar(&o.version, "version", "", "the version the fulfiller binary and the image carry (required)")
	flag.StringVar(&o.repository, "repository", "ghcr.io/fulfiller-sh/fulfiller", "the image's repository (the tag is the version)")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	flag.Parse()
	if o.root == "" || o.out == "" || o.tools == "" || o.version == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	epoch, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		log.Fatal(err)
	}
	o.epoch = epoch
	for _, p := range strings.Split(*platforms, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || osName != "linux" {
			log.Fatalf("platform %q: only linux/<arch> is built", p)
		}
		o.arches = append(o.arches, arch)
	}
	start := time.Now()
	res, err := build(context.Background(), o)
	if err != nil {
		log.Fatalf("image: %v", err)
	}
	fmt.Printf("image: %s:%s, index %s, in %s (%s)\n", o.repository, o.version, res.index, o.out, time.Since(start).Round(time.Second))
	for _, p := range res.platforms {
		fmt.Printf("image: linux/%s %s, %d files, %s uncompressed, %s compressed\n", p.arch, p.digest, p.files, mib(p.size), mib(p.compressed))
	}
}

type options struct {
	root, out, tools, version, repository string
	arches                                []string
	epoch                                 time.Time
}

// toolsFor is hack/tools.sh's folder for an architecture: the tools folder itself for this
// machine's, linux-<arch>/ in it for another (TOOLS_ARCH).
func (o options) toolsFor(arch string) string {
	if arch == runtime.GOARCH {
		return o.tools
	}
	return filepath.Join(o.tools, "linux-"+arch)
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/).
func sourceDateEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH is not set: the image's times come from it (make image sets the last commit's time)")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is no number of seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
