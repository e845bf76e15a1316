// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
)

// The simulated internet: the hosts install.sh downloads from, answering as they do. The
// Kubernetes community repository has a repository per minor from v1.24 to v1.37 (another
// minor is 403, as pkgs.k8s.io answers); GitHub has a release of containerd and runc at every
// version asked for. Every download takes the machine's PackageDelay and is subject to its
// PackageFault.

var internetHosts = map[string]bool{"pkgs.k8s.io": true, "github.com": true, "raw.githubusercontent.com": true}

var (
	releaseKeyPath  = regexp.MustCompile(`^/core:/stable:/v1\.([0-9]+)/deb/Release\.key$`)
	containerdPath  = regexp.MustCompile(`^/containerd/containerd/releases/download/v([0-9]+\.[0-9]+\.[0-9]+)/(containerd-([0-9.]+)-linux-(amd64|arm64)\.tar\.gz)(\.sha256sum)?$`)
	runcPath        = regexp.MustCompile(`^/opencontainers/runc/releases/download/v([0-9]+\.[0-9]+\.[0-9]+)/runc\.(amd64|arm64|sha256sum)$`)
	containerdUnitP = regexp.MustCompile(`^/containerd/containerd/v[0-9]+\.[0-9]+\.[0-9]+/containerd\.service$`)
)

// releaseKey stands for the repository's signing key, ASCII-armored.
const releaseKey = `-----BEGIN PGP PUBLIC KEY BLOCK-----

mQENBGMHoXcBCADukGOEQyleViOgtkMVa7hKifP6POCTh+98xNW4TfHK/nBJN2sm
simulated isv:kubernetes OBS Project key
-----END PGP PUBLIC KEY BLOCK-----
`

// runcRelease is the simulated runc binary: itself a program of the machine's.
func runcRelease(version string) string { return programMagic + "runc " + version + "\n" }

func sha256Line(content, name string) string {
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:]) + "  " + name + "\n"
}

// internet answers a request to one of internetHosts.
func (c *command) internet(r request) (status uint8, transient bool, body []byte, msg string) {
	if code, ok := c.packageOperation("", curlHTTPError); !ok {
		if code == curlTimeout {
			return curlTimeout, true, nil, "interrupted"
		}
		return curlHTTPError, r.fail, nil, "The requested URL returned error: 503"
	}
	var content string
	code := 200
	p := r.url.Path
	switch r.url.Hostname() {
	case "pkgs.k8s.io":
		if m := releaseKeyPath.FindStringSubmatch(p); m != nil {
			if minor, _ := strconv.Atoi(m[1]); minor >= 24 && minor <= 37 {
				content = releaseKey
			} else {
				code = 403
			}
		} else {
			code = 404
		}
	case "github.com":
		switch m := containerdPath.FindStringSubmatch(p); {
		case m != nil && m[1] == m[3] && m[5] == "":
			content = containerdTarball(m[1], m[4])
		case m != nil && m[1] == m[3]:
			content = sha256Line(containerdTarball(m[1], m[4]), m[2])
		default:
			if m := runcPath.FindStringSubmatch(p); m != nil {
				if m[2] == "sha256sum" {
					content = sha256Line(runcRelease(m[1]), "runc.amd64") + sha256Line(runcRelease(m[1]), "runc.arm64")
				} else {
					content = runcRelease(m[1])
				}
			} else {
				code = 404
			}
		}
	case "raw.githubusercontent.com":
		if containerdUnitP.MatchString(p) {
			content = containerdUnit
		} else {
			code = 404
		}
	}
	if code != 200 {
		if r.fail {
			return curlHTTPError, false, nil, fmt.Sprintf("The requested URL returned error: %d", code)
		}
		return 0, false, []byte("Not Found\n"), ""
	}
	return 0, false, []byte(content), ""
}
