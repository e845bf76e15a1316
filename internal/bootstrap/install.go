// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// The scripts the user data puts on a machine (scripts/): boot.sh joins, install.sh installs
// the node software on a stock image (and is what images/ bakes into an image).
var (
	//go:embed scripts/install.sh
	InstallScript []byte
	//go:embed scripts/boot.sh
	BootScript []byte
)

// Where the user data writes the fulfiller's files on the machine.
const (
	InstallScriptPath = "/usr/local/lib/fulfiller/install.sh"
	BootScriptPath    = "/usr/local/lib/fulfiller/boot.sh"
	// BootEnvPath holds the boot script's settings (0600).
	BootEnvPath = "/etc/fulfiller/boot.env"
	// ReportCAPath is the cluster CA the machine checks the API server against when it
	// reports, before kubeadm has discovered it.
	ReportCAPath = "/etc/fulfiller/ca.crt"
	// ReportAuthPath holds the Authorization header of its reports: the claim's token (0600).
	ReportAuthPath = "/etc/fulfiller/report-auth"
)

// ourPaths are the files an extra cloud-config may not write.
var ourPaths = []string{JoinConfigPath, InstallScriptPath, BootScriptPath, BootEnvPath, ReportCAPath, ReportAuthPath}

// Install says how a machine gets its node software: containerd, runc, the CNI plugins,
// kubelet, kubeadm and kubectl.
type Install struct {
	// Packages makes the boot script run install.sh first, which installs them on a stock
	// Ubuntu 22.04/24.04 or Debian 12 image from the Kubernetes community packages of
	// KubernetesVersion's minor and containerd's and runc's releases. Otherwise the image has
	// them.
	Packages bool
	// KubernetesVersion of kubelet, kubeadm and kubectl, vX.Y.Z; required with Packages.
	KubernetesVersion string
	// ContainerdVersion and RuncVersion (X.Y.Z); empty for install.sh's defaults.
	ContainerdVersion string
	RuncVersion       string
}

var (
	kubernetesVersionPattern = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)
	releasePattern           = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
)

// Validate checks the versions install.sh is given.
func (i Install) Validate() error {
	if !i.Packages {
		return nil
	}
	var errs []error
	if !kubernetesVersionPattern.MatchString(i.KubernetesVersion) {
		errs = append(errs, fmt.Errorf("installing the node software needs a Kubernetes version like v1.36.3, not %q", i.KubernetesVersion))
	}
	for name, v := range map[string]string{"containerd": i.ContainerdVersion, "runc": i.RuncVersion} {
		if v != "" && !releasePattern.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s version %q is not like 2.1.4", name, v))
		}
	}
	return errors.Join(errs...)
}

func (i Install) mode() string {
	if i.Packages {
		return "packages"
	}
	return "none"
}

// env is install.sh's settings.
func (i Install) env() []envVar {
	vars := []envVar{{"KUBERNETES_VERSION", i.KubernetesVersion}}
	if i.ContainerdVersion != "" {
		vars = append(vars, envVar{"CONTAINERD_VERSION", i.ContainerdVersion})
	}
	if i.RuncVersion != "" {
		vars = append(vars, envVar{"RUNC_VERSION", i.RuncVersion})
	}
	return vars
}

// Report is where a machine reports its boot progress: its claim's BootReport status, which
// its bootstrap token may patch and nothing else (docs/node-bootstrap.md).
type Report struct {
	// URL of the BootReport's status subresource (ReportURL).
	URL string
	// CAPEM is the cluster CA, which the API server's certificate must chain to.
	CAPEM []byte
}

// ReportURL is the URL of a BootReport's status on the API server at endpoint (host:port).
func ReportURL(endpoint, group, version, namespace, name string) string {
	return (&url.URL{Scheme: "https", Host: endpoint,
		Path: "/apis/" + group + "/" + version + "/namespaces/" + namespace + "/bootreports/" + name + "/status"}).String()
}

// Validate checks that the report can be sent.
func (r Report) Validate() error {
	u, err := url.Parse(r.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("boot report URL %q is not an https URL", r.URL)
	}
	if !strings.Contains(string(r.CAPEM), "-----BEGIN CERTIFICATE-----") {
		return errors.New("boot report: the cluster CA is not a PEM certificate")
	}
	return nil
}
