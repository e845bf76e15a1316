// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"fmt"
	"net/url"
	"strings"
)

// ProviderIDSource says where a machine learns its provider ID when it is not known before
// the machine exists (Hetzner Cloud assigns server IDs at creation): the boot script reads
// the instance ID from URL, a metadata service, and joins with Prefix + that ID; a failure
// stops before `kubeadm join`, so a machine never registers with a wrong provider ID. No
// cloud-controller-manager is needed to set the Node's spec.providerID.
type ProviderIDSource struct {
	URL    string
	Prefix string
}

// InstanceIDPlaceholder stands for the instance ID in the JoinConfiguration until the
// machine has read it from the metadata service.
const InstanceIDPlaceholder = "__FULFILLER_INSTANCE_ID__"

// Validate checks that the URL and prefix can be written into a shell script and a
// provider ID safely.
func (p ProviderIDSource) Validate() error {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("metadata URL %q must be an http or https URL", p.URL)
	}
	if strings.ContainsAny(p.URL, "'\"\\` \t\n$") {
		return fmt.Errorf("metadata URL %q may not hold quotes, backslashes, spaces or $", p.URL)
	}
	if p.Prefix == "" || strings.ContainsAny(p.Prefix, "'\"\\` \t\n$|&,") {
		return fmt.Errorf("provider ID prefix %q must be set and may not hold quotes, spaces, $, |, & or commas", p.Prefix)
	}
	return nil
}
