// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"path"
	"strings"
)

// What the fulfiller runs on a server over SSH. The commands are fixed strings (values travel
// on stdin or inside generated files, never on a command line), so that what a server is
// asked to do can be read here in full.
const (
	// WorkDir is where the rescue system keeps the install's files.
	WorkDir = "/root/fulfiller"
	// InstallConfigPath and PostInstallPath are installimage's configuration (-c) and
	// post-install script (-x).
	InstallConfigPath = WorkDir + "/install.conf"
	PostInstallPath   = WorkDir + "/post-install.sh"
	// StatePath holds the installed system's state: standby (OS and kubelet installed, not
	// joined) or active (joined, or joining).
	StatePath = "/var/lib/fulfiller/state"

	// CommandInstall runs installimage unattended in the rescue system and waits for it.
	CommandInstall = "installimage -a -c " + InstallConfigPath + " -x " + PostInstallPath
	// CommandInstallDetached starts installimage and the reboot after it in the background:
	// it goes on after the SSH session (and the runner) ends.
	CommandInstallDetached = "nohup sh -c '" + CommandInstall + " && reboot' > " + WorkDir + "/install.log 2>&1 < /dev/null &"
	// CommandReboot reboots the system.
	CommandReboot = "reboot"
	// CommandState prints the installed system's state.
	CommandState = "cat " + StatePath
	// CommandJoin writes the user data on stdin as the NoCloud seed, runs cloud-init from it
	// (its runcmd starts kubeadm join and the kubelet) and marks the system active.
	CommandJoin = "umask 077 && mkdir -p /var/lib/cloud/seed/nocloud && cat > /var/lib/cloud/seed/nocloud/user-data" +
		" && cloud-init clean && cloud-init init && cloud-init modules --mode=config && cloud-init modules --mode=final" +
		" && echo active > " + StatePath

	// StateStandby and StateActive are the values of StatePath.
	StateStandby = "standby"
	StateActive  = "active"
)

// WriteFileCommand writes stdin to a file of WorkDir (mode 0600).
func WriteFileCommand(file string) string {
	return "umask 077 && mkdir -p " + path.Dir(file) + " && cat > " + file
}

// InstallConfig is installimage's configuration: the drives (software RAID 1 over two or
// more), the hostname, and the image (a path in the rescue system's image folder, or a URL
// of a tar.gz image).
func InstallConfig(hostname, image string, drives []string) string {
	var b strings.Builder
	for i, d := range drives {
		fmt.Fprintf(&b, "DRIVE%d %s\n", i+1, d)
	}
	if len(drives) > 1 {
		b.WriteString("SWRAID 1\nSWRAIDLEVEL 1\n")
	} else {
		b.WriteString("SWRAID 0\n")
	}
	fmt.Fprintf(&b, "BOOTLOADER grub\nHOSTNAME %s\n", hostname)
	b.WriteString("PART /boot ext3 1024M\nPART / ext4 all\n")
	fmt.Fprintf(&b, "IMAGE %s\n", image)
	return b.String()
}

// ParseInstallConfig reads the keys of an installimage configuration (the last of a key
// wins; DRIVEn and PART keep every value).
func ParseInstallConfig(conf string) map[string][]string {
	out := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(conf))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, _ := strings.Cut(line, " ")
		out[key] = append(out[key], strings.TrimSpace(value))
	}
	return out
}

// Heredoc markers of the post-install script's payloads.
const (
	payloadHostKey       = "FULFILLER_HOST_KEY"
	payloadAuthorizedKey = "FULFILLER_AUTHORIZED_KEY"
	payloadUserData      = "FULFILLER_USER_DATA"
)

// PostInstall is what the post-install script puts into the installed system.
type PostInstall struct {
	// HostKeyPEM is the private ed25519 host key (OpenSSH PEM); its public key is recorded.
	HostKeyPEM []byte
	// AuthorizedKey is the fulfiller's public key (authorized_keys format) for root.
	AuthorizedKey string
	// UserData is the cloud-init user data of a cold activation: cloud-init runs it at first
	// boot and the server joins. Empty for a standby install, which waits for CommandJoin.
	UserData []byte
	// InstanceID is the NoCloud instance-id (a new one makes cloud-init run again).
	InstanceID string
}

// Script renders the post-install script. installimage runs it chrooted in the installed
// system; the payloads travel base64-encoded in quoted heredocs, so no value is ever
// interpreted by the shell.
func (p PostInstall) Script() string {
	var b strings.Builder
	b.WriteString("#!/bin/bash\n# Written by the fulfiller; run by installimage -x in the installed system.\nset -euo pipefail\n")
	b.WriteString("rm -f /etc/ssh/ssh_host_*\n")
	heredoc(&b, "/etc/ssh/ssh_host_ed25519_key", payloadHostKey, p.HostKeyPEM)
	b.WriteString("chmod 0600 /etc/ssh/ssh_host_ed25519_key\nssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key > /etc/ssh/ssh_host_ed25519_key.pub\n")
	b.WriteString("install -d -m 0700 /root/.ssh\n")
	heredoc(&b, "/root/.ssh/authorized_keys", payloadAuthorizedKey, []byte(p.AuthorizedKey+"\n"))
	b.WriteString("chmod 0600 /root/.ssh/authorized_keys\ninstall -d -m 0700 /var/lib/cloud/seed/nocloud /var/lib/fulfiller\n")
	fmt.Fprintf(&b, "printf 'instance-id: %%s\\n' %q > /var/lib/cloud/seed/nocloud/meta-data\n", p.InstanceID)
	if len(p.UserData) > 0 {
		heredoc(&b, "/var/lib/cloud/seed/nocloud/user-data", payloadUserData, p.UserData)
		fmt.Fprintf(&b, "echo %s > %s\n", StateActive, StatePath)
	} else {
		b.WriteString("printf '#cloud-config\\n{}\\n' > /var/lib/cloud/seed/nocloud/user-data\n")
		fmt.Fprintf(&b, "echo %s > %s\n", StateStandby, StatePath)
	}
	return b.String()
}

func heredoc(b *strings.Builder, file, marker string, data []byte) {
	fmt.Fprintf(b, "base64 -d > %s <<'%s'\n", file, marker)
	enc := base64.StdEncoding.EncodeToString(data)
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\n" + marker + "\n")
}

// ParsePostInstall reads the payloads back from a script Script wrote (what a system that
// ran it would hold).
func ParsePostInstall(script string) (PostInstall, error) {
	var p PostInstall
	payloads := map[string][]byte{}
	lines := strings.Split(script, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "base64 -d > ") {
			if strings.HasPrefix(line, "printf 'instance-id: %s\\n' ") {
				p.InstanceID = strings.Trim(strings.Fields(line)[3], `"`)
			}
			continue
		}
		_, marker, ok := strings.Cut(line, "<<'")
		if !ok {
			return p, fmt.Errorf("post-install line %d: no heredoc", i+1)
		}
		marker = strings.TrimSuffix(marker, "'")
		var enc strings.Builder
		for i++; i < len(lines) && lines[i] != marker; i++ {
			enc.WriteString(lines[i])
		}
		data, err := base64.StdEncoding.DecodeString(enc.String())
		if err != nil {
			return p, fmt.Errorf("post-install payload %s: %w", marker, err)
		}
		payloads[marker] = data
	}
	p.HostKeyPEM = payloads[payloadHostKey]
	p.AuthorizedKey = strings.TrimSpace(string(payloads[payloadAuthorizedKey]))
	p.UserData = payloads[payloadUserData]
	if len(p.HostKeyPEM) == 0 || p.AuthorizedKey == "" {
		return p, fmt.Errorf("post-install script has no host key or authorized key")
	}
	return p, nil
}
