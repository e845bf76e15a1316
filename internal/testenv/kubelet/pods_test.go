// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestPathMapRewrite(t *testing.T) {
	p := pathMap{{from: "/run/request", to: "/tmp/p/volumes/request"}, {from: "/work", to: "/tmp/p/volumes/work"}}
	for in, want := range map[string]string{
		"/run/request/request.json": "/tmp/p/volumes/request/request.json",
		"/work":                     "/tmp/p/volumes/work",
		"--work-dir=/work/x":        "--work-dir=/tmp/p/volumes/work/x",
		"/workspace":                "/workspace",
		"/run/requests":             "/run/requests",
		"KEY=/work":                 "KEY=/work",
		"plain":                     "plain",
	} {
		if got := p.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPathMapImagePaths: the tools' folder under /tmp keeps its local paths though the pod
// mounts an emptyDir on /tmp; the rest of /tmp is the emptyDir's.
func TestPathMapImagePaths(t *testing.T) {
	p := newPathMap([]pathMapping{{from: "/tmp", to: "/k/pod/tmp"}, {from: "/dev/termination-log", to: "/k/pod/termination-log"}},
		[]string{"/tmp/cache/tools/"})
	for in, want := range map[string]string{
		"/tmp/cache/tools/tofurc":   "/tmp/cache/tools/tofurc",
		"/tmp/cache/tools":          "/tmp/cache/tools",
		"/tmp/cache/toolsx":         "/k/pod/tmp/cache/toolsx",
		"/tmp/cache/other":          "/k/pod/tmp/cache/other",
		"/tmp":                      "/k/pod/tmp",
		"-config=/tmp/cache/tools/": "-config=/tmp/cache/tools",
		"/dev/termination-log":      "/k/pod/termination-log",
	} {
		if got := p.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestContainerAccess: as a real node, a container of the image's user cannot read a Secret
// volume's 0440 file owned by root; with the pod's fsGroup the kubelet gives the volume to
// that group and it can. Writable emptyDirs and the termination message file are checked the
// same way, by the kernel, as the container's user.
func TestContainerAccess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the stand-in kubelet's access check runs as root (it changes to the container's user)")
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	work := filepath.Join(dir, "work")
	for _, d := range []string{secret, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(secret, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := writeKeys(secret, map[string][]byte{"request.json": []byte("{}")}, nil, 0o440); err != nil {
		t.Fatal(err)
	}
	term := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(term, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mounts := []accessMount{{containerPath: "/run/request", local: secret}, {containerPath: "/work", local: work, write: true}}
	user := identity{uid: 65532, gid: 65532}

	err := checkAccess(user, mounts, term, "/dev/termination-log")
	var fails *errContainerFails
	if !errors.As(err, &fails) || !strings.Contains(err.Error(), "cannot read /run/request/request.json (-r--r----- 0:0)") {
		t.Fatalf("a root-owned 0440 request read as uid 65532: %v", err)
	}
	// The pod's fsGroup: the kubelet gives the volume to the group, which the user is in.
	group := int64(65532)
	if err := setVolumeOwnership(secret, &group, true); err != nil {
		t.Fatal(err)
	}
	withGroup := identity{uid: 65532, gid: 65532, groups: []int64{group}}
	if err := checkAccess(withGroup, mounts, term, "/dev/termination-log"); err == nil || !strings.Contains(err.Error(), "termination message file /dev/termination-log") {
		t.Fatalf("a 0644 termination message file written as uid 65532: %v", err)
	}
	if err := os.Chmod(term, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := checkAccess(withGroup, mounts, term, "/dev/termination-log"); err != nil {
		t.Fatalf("with fsGroup: %v", err)
	}
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkAccess(withGroup, mounts, term, "/dev/termination-log"); err == nil || !strings.Contains(err.Error(), "create files in /work") {
		t.Fatalf("a root-owned 0755 emptyDir written as uid 65532: %v", err)
	}
	if err := checkAccess(identity{}, mounts, term, "/dev/termination-log"); err != nil {
		t.Fatalf("root: %v", err)
	}
}

func TestRunAsNonRoot(t *testing.T) {
	k := &Kubelet{cfg: Config{}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), FSGroup: ptr.To[int64](7)},
		Containers:      []corev1.Container{{Name: "c"}},
	}}
	if _, err := k.containerIdentity(pod, pod.Spec.Containers[0]); err == nil {
		t.Error("runAsNonRoot with an image that runs as root was accepted")
	}
	k.cfg.ImageUser, k.cfg.ImageGroup = 65532, 65532
	id, err := k.containerIdentity(pod, pod.Spec.Containers[0])
	if err != nil || id.uid != 65532 || id.gid != 65532 || len(id.groups) != 1 || id.groups[0] != 7 {
		t.Errorf("identity %+v, %v", id, err)
	}
}
