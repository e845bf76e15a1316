#!/bin/sh
# Installs and configures what a Kubernetes node needs before `kubeadm join`, on a stock
# Ubuntu 22.04, Ubuntu 24.04 or Debian 12 machine, amd64 or arm64: containerd and runc from
# their release binaries (Kubernetes 1.36 and later need containerd 2), the CNI plugins,
# kubelet, kubeadm and kubectl of one Kubernetes version from the Kubernetes community
# package repository of its minor (pkgs.k8s.io), swap off, the overlay and br_netfilter
# modules, the sysctls kubeadm's preflight checks, containerd with the systemd cgroup driver
# and kubeadm's pause image. It joins nothing.
#
# The fulfiller's user data runs it at boot (boot.sh); an image build runs the same script
# (images/). Running it again changes nothing that is already as it should be: a node that
# joined keeps running. Downloads are retried. Settings, from the environment:
#
#   KUBERNETES_VERSION  v1.36.3 (required; the packages of exactly that version)
#   CONTAINERD_VERSION  2.1.4
#   RUNC_VERSION        1.3.0
#   FULFILLER_STATE     /var/lib/fulfiller: where the step being run and, on failure, the
#                       step and the last line of the failing command are written (step,
#                       failure), for boot.sh's progress reports
#   FULFILLER_RETRIES   4: attempts of every download and package operation
#
# Each step is printed as "fulfiller-install: <step>"; a failure as
# "fulfiller-install: <step> failed: <what> (<last line of its output>)", exit status 1.
set -eu

KUBERNETES_VERSION=${KUBERNETES_VERSION:?KUBERNETES_VERSION must be set, e.g. v1.36.3}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-2.1.4}
RUNC_VERSION=${RUNC_VERSION:-1.3.0}
FULFILLER_STATE=${FULFILLER_STATE:-/var/lib/fulfiller}
FULFILLER_RETRIES=${FULFILLER_RETRIES:-4}
export DEBIAN_FRONTEND=noninteractive

version=${KUBERNETES_VERSION#v}
minor=${version%.*}
case $version in
  [0-9]*.[0-9]*.[0-9]*) ;;
  *) echo "fulfiller-install: KUBERNETES_VERSION $KUBERNETES_VERSION is not a version like v1.36.3" >&2; exit 1 ;;
esac

mkdir -p "$FULFILLER_STATE"
rm -f "$FULFILLER_STATE/failure"
step=start

# step NAME: the next step.
step() {
  step=$1
  printf '%s\n' "$step" >"$FULFILLER_STATE/step"
  echo "fulfiller-install: $step"
}

# fail WHAT: the step failed; WHAT says how.
fail() {
  printf '%s\n%s\n' "$step" "$1" >"$FULFILLER_STATE/failure"
  echo "fulfiller-install: $step failed: $1" >&2
  exit 1
}

# run CMD...: runs a command, its output shown; when it fails, the step fails with the
# command's last line of output.
run() {
  out=$FULFILLER_STATE/command.log
  rc=0
  "$@" >"$out" 2>&1 || rc=$?
  cat "$out"
  if [ "$rc" -ne 0 ]; then
    last=
    while IFS= read -r line; do
      case $line in *[![:space:]]*) last=$line ;; esac
    done <"$out"
    fail "$1 exited with status $rc${last:+ ($last)}"
  fi
}

# retry CMD...: runs a command until it succeeds, at most FULFILLER_RETRIES times, waiting 2,
# 4, 8, ... seconds between attempts; it fails with the last attempt's status.
retry() {
  retry_n=1 retry_wait=2
  while :; do
    retry_rc=0
    "$@" || retry_rc=$?
    [ "$retry_rc" -ne 0 ] || return 0
    if [ "$retry_n" -ge "$FULFILLER_RETRIES" ]; then
      return "$retry_rc"
    fi
    echo "fulfiller-install: $1 failed with status $retry_rc (attempt $retry_n of $FULFILLER_RETRIES), retrying in ${retry_wait}s" >&2
    sleep "$retry_wait"
    retry_n=$((retry_n + 1)) retry_wait=$((retry_wait * 2))
  done
}

# fetch URL FILE: downloads URL to FILE, retried on any error.
fetch() {
  retry curl -fsSL --connect-timeout 15 --max-time 600 -o "$2" "$1"
}

# verify FILE SUMS: checks FILE against its line in the sha256sum file SUMS.
verify() {
  want=
  while read -r sum name; do
    [ "${name#\*}" = "${1##*/}" ] && want=$sum
  done <"$2"
  [ -n "$want" ] || { echo "${2##*/} lists no ${1##*/}"; return 1; }
  set -- "$1" "$(sha256sum "$1")"
  [ "${2%% *}" = "$want" ] || { echo "${1##*/}: sha256 ${2%% *}, want $want"; return 1; }
  echo "${1##*/}: OK"
}

# apt_get ARGS...: apt-get that waits for the dpkg lock (cloud images run unattended
# upgrades at first boot) and retries downloads.
apt_get() {
  retry apt-get -q -y -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3 "$@"
}

# write_if_changed FILE CONTENT: writes FILE when its content differs; says whether it did.
write_if_changed() {
  if [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; then
    return 1
  fi
  mkdir -p "${1%/*}"
  printf '%s\n' "$2" >"$1"
}

step os
[ -r /etc/os-release ] || fail "/etc/os-release is missing"
# shellcheck disable=SC1091
. /etc/os-release
case "${ID:-}-${VERSION_ID:-}" in
  ubuntu-22.04 | ubuntu-24.04 | debian-12) ;;
  *) fail "unsupported operating system ${PRETTY_NAME:-${ID:-unknown}}: Ubuntu 22.04, Ubuntu 24.04 and Debian 12 are" ;;
esac
arch=$(dpkg --print-architecture)
case $arch in
  amd64 | arm64) ;;
  *) fail "unsupported architecture $arch: amd64 and arm64 are" ;;
esac

step swap
run swapoff -a
if [ -f /etc/fstab ]; then
  run sed -i '/^[^#].*[[:space:]]swap[[:space:]]/ s/^/#/' /etc/fstab
fi

step kernel-modules
write_if_changed /etc/modules-load.d/kubernetes.conf "overlay
br_netfilter" || true
run modprobe overlay
run modprobe br_netfilter

step sysctl
write_if_changed /etc/sysctl.d/99-kubernetes.conf "net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.ip_forward = 1" || true
run sysctl --system

step apt-prerequisites
if ! curl --version >/dev/null 2>&1 || ! gpg --version >/dev/null 2>&1 || [ ! -f /etc/ssl/certs/ca-certificates.crt ]; then
  run apt_get update
  run apt_get install --no-install-recommends ca-certificates curl gpg
fi

step kubernetes-repository
repo="https://pkgs.k8s.io/core:/stable:/v$minor/deb/"
keyring=/etc/apt/keyrings/kubernetes-v$minor.gpg
if [ ! -s "$keyring" ]; then
  mkdir -p /etc/apt/keyrings
  run fetch "${repo}Release.key" "$FULFILLER_STATE/kubernetes-release.key"
  run gpg --batch --yes --dearmor -o "$keyring" "$FULFILLER_STATE/kubernetes-release.key"
fi
if write_if_changed /etc/apt/sources.list.d/kubernetes.list "deb [signed-by=$keyring] $repo /"; then
  run apt_get update
fi

step kubernetes-packages
if [ "$(kubeadm version -o short 2>/dev/null || true)" != "v$version" ] ||
  [ "$(kubelet --version 2>/dev/null || true)" != "Kubernetes v$version" ] || ! kubectl version --client >/dev/null 2>&1; then
  pkg=
  apt-cache madison kubeadm >"$FULFILLER_STATE/kubeadm.versions" 2>&1 || true
  while IFS='| ' read -r _ candidate _; do
    case $candidate in "$version"-*) pkg=$candidate ;; esac
  done <"$FULFILLER_STATE/kubeadm.versions"
  [ -n "$pkg" ] || fail "the repository $repo has no kubeadm $version"
  run apt_get install --no-install-recommends --allow-downgrades --allow-change-held-packages \
    "kubelet=$pkg" "kubeadm=$pkg" "kubectl=$pkg"
  run apt-mark hold kubelet kubeadm kubectl
fi

step containerd
case "$(containerd --version 2>/dev/null || true)" in
  *" v$CONTAINERD_VERSION "*) ;;
  *)
    tarball=containerd-$CONTAINERD_VERSION-linux-$arch.tar.gz
    base=https://github.com/containerd/containerd/releases/download/v$CONTAINERD_VERSION
    run fetch "$base/$tarball" "$FULFILLER_STATE/$tarball"
    run fetch "$base/$tarball.sha256sum" "$FULFILLER_STATE/$tarball.sha256sum"
    run verify "$FULFILLER_STATE/$tarball" "$FULFILLER_STATE/$tarball.sha256sum"
    run tar -C /usr/local -xzf "$FULFILLER_STATE/$tarball"
    run fetch "https://raw.githubusercontent.com/containerd/containerd/v$CONTAINERD_VERSION/containerd.service" "$FULFILLER_STATE/containerd.service"
    run install -D -m 0644 "$FULFILLER_STATE/containerd.service" /usr/local/lib/systemd/system/containerd.service
    rm -f "$FULFILLER_STATE/$tarball"
    ;;
esac

step runc
case "$(runc --version 2>/dev/null || true)" in
  "runc version $RUNC_VERSION"*) ;;
  *)
    base=https://github.com/opencontainers/runc/releases/download/v$RUNC_VERSION
    run fetch "$base/runc.$arch" "$FULFILLER_STATE/runc.$arch"
    run fetch "$base/runc.sha256sum" "$FULFILLER_STATE/runc.sha256sum"
    run verify "$FULFILLER_STATE/runc.$arch" "$FULFILLER_STATE/runc.sha256sum"
    run install -m 0755 "$FULFILLER_STATE/runc.$arch" /usr/local/sbin/runc
    rm -f "$FULFILLER_STATE/runc.$arch"
    ;;
esac

step containerd-config
pause=
for image in $(kubeadm config images list --kubernetes-version "v$version" 2>/dev/null); do
  case $image in */pause:*) pause=$image ;; esac
done
[ -n "$pause" ] || fail "kubeadm config images list names no pause image for v$version"
run mkdir -p /etc/containerd
config=$(containerd config default | sed \
  -e 's/^\([[:space:]]*SystemdCgroup[[:space:]]*=[[:space:]]*\)false/\1true/' \
  -e "s|^\([[:space:]]*sandbox[[:space:]]*=[[:space:]]*\).*|\1'$pause'|")
case $config in
  *"SystemdCgroup = true"*) ;;
  *) fail "containerd $CONTAINERD_VERSION's default configuration has no SystemdCgroup setting to turn on" ;;
esac
case $config in
  *"'$pause'"*) ;;
  *) fail "containerd $CONTAINERD_VERSION's default configuration has no sandbox image setting for $pause" ;;
esac
restart=false
if write_if_changed /etc/containerd/config.toml "$config"; then
  restart=true
fi

step services
run systemctl daemon-reload
run systemctl enable containerd kubelet
if [ "$restart" = true ]; then
  run systemctl restart containerd
else
  run systemctl start containerd
fi
run systemctl is-active containerd

step installed
echo "fulfiller-install: Kubernetes v$version, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION and $pause are in place"
