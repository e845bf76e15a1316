// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package tfrunner

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"
)

// Module registry addresses, as OpenTofu's module registry protocol names them:
// [host[:port]/]namespace/name/system, with an optional //subdir. Without a host the address
// is on registry.opentofu.org. tofu takes a source that parses as one for a registry address
// and anything else for a go-getter address, so IsRegistrySource follows the same rules: a
// host has a dot and is not github.com or bitbucket.org (their shorthands are repositories),
// a namespace and a name are letters, digits, dashes and underscores (neither first nor last,
// at most 64), a system is lower-case letters and digits, and there is no query string.
var (
	registryNamePattern   = regexp.MustCompile(`^[0-9A-Za-z](?:[0-9A-Za-z_-]{0,62}[0-9A-Za-z])?$`)
	registrySystemPattern = regexp.MustCompile(`^[0-9a-z]{1,64}$`)
	registryHostPattern   = regexp.MustCompile(`^[0-9A-Za-z](?:[0-9A-Za-z-]*[0-9A-Za-z])?(?:\.[0-9A-Za-z](?:[0-9A-Za-z-]*[0-9A-Za-z])?)+$`)
)

// IsRegistrySource reports whether a module source is a module registry address, the only
// kind of source a version constraint applies to.
func IsRegistrySource(source string) bool {
	if IsLocalSource(source) || strings.Contains(source, "::") || strings.Contains(source, "://") || strings.ContainsAny(source, "?#") {
		return false
	}
	pkg, _, _ := strings.Cut(source, "//")
	parts := strings.Split(pkg, "/")
	switch len(parts) {
	case 3:
	case 4:
		if !registryHost(parts[0]) {
			return false
		}
		parts = parts[1:]
	default:
		return false
	}
	return registryNamePattern.MatchString(parts[0]) && registryNamePattern.MatchString(parts[1]) &&
		registrySystemPattern.MatchString(parts[2])
}

func registryHost(host string) bool {
	name, port := host, ""
	if h, p, err := net.SplitHostPort(host); err == nil {
		name, port = h, p
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	switch strings.ToLower(name) {
	case "github.com", "bitbucket.org":
		return false
	}
	return registryHostPattern.MatchString(name)
}

// CheckModuleVersion refuses a version constraint on a remote source that is not a registry
// address (tofu refuses one too: git, HTTP and OCI sources name their release in the source,
// ?ref= or ?tag=) and a constraint tofu cannot parse. A local source's version is not passed
// to tofu, so any is accepted. Errors wrap ErrInvalidModule.
func CheckModuleVersion(source, constraint string) error {
	if constraint == "" || IsLocalSource(source) {
		return nil
	}
	if !IsRegistrySource(source) {
		return fmt.Errorf("%w: version %q is a version constraint, which only a module registry source (host/namespace/name/system) takes; %s names its release in the source (?ref= for git, ?tag= for OCI)", ErrInvalidModule, constraint, source)
	}
	if _, err := version.NewConstraint(constraint); err != nil {
		return fmt.Errorf("%w: version %q of %s is not a version constraint: %w", ErrInvalidModule, constraint, source, err)
	}
	return nil
}
