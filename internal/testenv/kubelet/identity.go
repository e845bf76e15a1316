// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// A container runs here as root, since its binaries and the tests' files are not reachable
// for another user on this machine. What a real node enforces about its user is reproduced
// around it instead: the volumes get a kubelet's ownership and modes, runAsNonRoot is
// enforced, and before the command starts the kernel itself is asked, as the container's user
// and groups, whether the container can use its files (checkAccess). A pod whose container
// could not read its request or write its termination message on a real node fails here too.

// identity is the user and groups a container runs as.
type identity struct {
	uid, gid int64
	groups   []int64 // supplemental groups and the pod's fsGroup
}

func (id identity) String() string {
	groups := make([]string, 0, len(id.groups))
	for _, g := range id.groups {
		groups = append(groups, strconv.FormatInt(g, 10))
	}
	return fmt.Sprintf("uid %d gid %d groups [%s]", id.uid, id.gid, strings.Join(groups, " "))
}

// containerIdentity is the user a container runs as: its own runAsUser/runAsGroup, the pod's,
// or the image's (Config.ImageUser/ImageGroup); with the pod's supplemental groups and
// fsGroup. runAsNonRoot with a root user is refused, as a kubelet refuses to start it.
func (k *Kubelet) containerIdentity(pod *corev1.Pod, c corev1.Container) (identity, error) {
	id := identity{uid: k.cfg.ImageUser, gid: k.cfg.ImageGroup}
	nonRoot := false
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			id.uid = *psc.RunAsUser
		}
		if psc.RunAsGroup != nil {
			id.gid = *psc.RunAsGroup
		}
		if psc.RunAsNonRoot != nil {
			nonRoot = *psc.RunAsNonRoot
		}
		id.groups = append(id.groups, psc.SupplementalGroups...)
		if psc.FSGroup != nil {
			id.groups = append(id.groups, *psc.FSGroup)
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			id.uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			id.gid = *sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
	}
	if nonRoot && id.uid == 0 {
		return id, errors.New("container has runAsNonRoot and image will run as root")
	}
	return id, nil
}

// fsUser is the user every container of the pod runs as by its own or the pod's runAsUser,
// nil when one sets none or they differ: a projected service-account token is given to it.
func fsUser(pod *corev1.Pod) *int64 {
	var user *int64
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		var u *int64
		if pod.Spec.SecurityContext != nil {
			u = pod.Spec.SecurityContext.RunAsUser
		}
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			u = c.SecurityContext.RunAsUser
		}
		if u == nil || user != nil && *user != *u {
			return nil
		}
		user = u
	}
	return user
}

func fsGroup(pod *corev1.Pod) *int64 {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// setVolumeOwnership gives a volume to the pod's fsGroup as a kubelet does: every file and
// folder gets the group and group read (and write, unless the volume is read-only)
// permission; folders also group search and the set-group-ID bit, so files made in them
// belong to the group. Without an fsGroup nothing changes.
func setVolumeOwnership(dir string, group *int64, readOnly bool) error {
	if group == nil {
		return nil
	}
	mask := fs.FileMode(0o660)
	if readOnly {
		mask = 0o440
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(*group)); err != nil {
			return err
		}
		mode := info.Mode().Perm() | info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) | mask
		if d.IsDir() {
			mode |= fs.ModeSetgid | 0o110
		}
		return os.Chmod(path, mode)
	})
}

// accessMount is a volume as the container uses it.
type accessMount struct {
	containerPath string // where the container sees it
	local         string // where it is here
	write         bool   // the container writes into it (an emptyDir mounted read-write)
}

// errContainerFails: the container would fail on a real node (its user cannot use its files).
type errContainerFails struct{ msg string }

func (e *errContainerFails) Error() string { return e.msg }

// checkAccess asks the kernel, as id, whether a container can read every file of its
// read-only volumes, create files in its writable ones and write its termination message
// file. A shell runs with id's user and groups and reaches each volume through a descriptor
// the kubelet opened, so that, as in the container's own mount namespace, only the
// permissions of the volume and what is in it count. Root needs no check.
func checkAccess(id identity, mounts []accessMount, termPath, containerTermPath string) error {
	if id.uid == 0 {
		return nil
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	open := func(path string) (string, error) {
		f, err := os.Open(path)
		if err != nil {
			return "", err
		}
		files = append(files, f)
		return "/proc/self/fd/" + strconv.Itoa(2+len(files)), nil
	}
	var script strings.Builder
	script.WriteString("fail() { printf '%s\\n' \"$1\"; exit 1; }\n")
	check := func(test, path, failure string) {
		fmt.Fprintf(&script, "%s %s || fail %s\n", test, shellQuote(path), shellQuote(failure))
	}
	for _, m := range mounts {
		fd, err := open(m.local)
		if err != nil {
			return err
		}
		info, err := os.Stat(m.local)
		if err != nil {
			return err
		}
		if !info.IsDir() {
			check("test -r", fd, "read "+m.containerPath+" "+describe(m.local))
			continue
		}
		if m.write {
			probe := fd + "/.kubelet-access-check"
			fmt.Fprintf(&script, "( : > %s ) 2>/dev/null && rm -f %s || fail %s\n", shellQuote(probe), shellQuote(probe),
				shellQuote("create files in "+m.containerPath+" "+describe(m.local)))
			continue
		}
		var rels []string
		err = filepath.WalkDir(m.local, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				rel, _ := filepath.Rel(m.local, path)
				rels = append(rels, rel)
			}
			return err
		})
		if err != nil {
			return err
		}
		sort.Strings(rels)
		for _, rel := range rels {
			check("test -r", fd+"/"+rel, "read "+filepath.Join(m.containerPath, rel)+" "+describe(filepath.Join(m.local, rel)))
		}
	}
	fd, err := open(termPath)
	if err != nil {
		return err
	}
	check("test -w", fd, "write its termination message file "+containerTermPath+" "+describe(termPath))

	groups := make([]uint32, 0, len(id.groups))
	for _, g := range id.groups {
		groups = append(groups, uint32(g))
	}
	cmd := exec.Command("/bin/sh", "-c", script.String())
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(id.uid), Gid: uint32(id.gid), Groups: groups}}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return &errContainerFails{fmt.Sprintf("the container's user (%s) cannot %s", id, strings.TrimSpace(string(out)))}
	}
	if err != nil {
		return fmt.Errorf("checking the container's access as %s: %w: %s", id, err, out)
	}
	return nil
}

// describe is a file's mode and owner, as ls shows them.
func describe(path string) string {
	info, err := os.Stat(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "(" + info.Mode().String() + ")"
	}
	return fmt.Sprintf("(%s %d:%d)", info.Mode().String(), st.Uid, st.Gid)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
