#!/usr/bin/env bash
# Builds the pinned tools the tests and the local environment need, from source, through the
# Go module proxy (nothing else can be downloaded here). Each tool is cached outside the clone
# as $FULFILLER_CACHE/tools/<name>-<version> and linked into $FULFILLER_CACHE/tools/bin, so a
# second run, or CI on the same machine, reuses it.
#
#   hack/tools.sh            build what is missing, print the bin folder
#   TOOLS="tofu etcd" ...    build only these
#   TOOLS="karpenter-kwok kwok" hack/tools.sh   the benchmarks' tools (make bench-tools)
#
# The OpenTofu providers the shipped modules require are built the same way and laid out as a
# filesystem mirror in $FULFILLER_CACHE/tools/providers (registry.opentofu.org/<ns>/<type>/
# <version>/<os>_<arch>/terraform-provider-<type>_v<version>), with a CLI configuration that
# installs from it only: $FULFILLER_CACHE/tools/tofurc (TF_CLI_CONFIG_FILE). Tests, the local
# environment and the image's mirror all use these builds.
#
# `make bench` compares the fulfiller with Karpenter's own kwok provider: `karpenter-kwok` is
# the kwok main package of the Karpenter core module the project pins, and `kwok` is the
# kwok controller that gives the Nodes it creates a status; kwok >= 0.8 has no built-in
# stages, so the script also writes the default ones (node-initialize, node heartbeat with
# lease, pod ready/complete/delete) from kwok's source to $FULFILLER_CACHE/tools/bin/kwok-stages.yaml.
# Only the benchmarks use these two, so the default TOOLS leave them out (a cold `make tools`,
# which CI runs, does not build them); `make bench-tools` builds them.
#
# The image (`make image`, hack/image) ships tofu and the providers for linux/amd64 and
# linux/arm64. TOOLS_ARCH=arm64 (or amd64 on an arm64 machine) cross-compiles tofu and the
# providers for that architecture into a folder of its own, $FULFILLER_CACHE/tools/linux-<arch>/
# (<tool>-<version>, bin/ and providers/ laid out as above); these cannot run here, so instead of
# running them the script checks the architecture their build info records. With
# TOOLS_ARCH unset or this machine's, tools land in $FULFILLER_CACHE/tools as always.
#
# golangci-lint (`make lint`, which `make test` runs) is built like the others and is in the
# default TOOLS; `TOOLS=golangci-lint hack/tools.sh` builds it alone.
#
# Knobs: K8S_VERSION ETCD_VERSION TOFU_VERSION HELM_VERSION CONTROLLER_GEN_VERSION
# HCLOUD_PROVIDER_VERSION KUBECTL_PROVIDER_VERSION KARPENTER_VERSION KWOK_VERSION CRD_REF_DOCS_VERSION
# GOLANGCI_LINT_VERSION FULFILLER_CACHE TOOLS TOOLS_ARCH TOOLS_JOBS.
set -euo pipefail
shopt -s inherit_errexit

K8S_VERSION=${K8S_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.8}
TOFU_VERSION=${TOFU_VERSION:-1.12.6}
HELM_VERSION=${HELM_VERSION:-3.22.0}
CONTROLLER_GEN_VERSION=${CONTROLLER_GEN_VERSION:-0.21.0}
CRD_REF_DOCS_VERSION=${CRD_REF_DOCS_VERSION:-0.3.0}
GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:-2.15.0}
HCLOUD_PROVIDER_VERSION=${HCLOUD_PROVIDER_VERSION:-1.58.0}
KUBECTL_PROVIDER_VERSION=${KUBECTL_PROVIDER_VERSION:-1.19.0}
KARPENTER_VERSION=${KARPENTER_VERSION:-1.15.0}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
FULFILLER_CACHE=${FULFILLER_CACHE:-$HOME/.cache/fulfiller}
TOOLS=${TOOLS:-"kube-apiserver kube-controller-manager kube-scheduler kubectl kubeadm tofu provider-kubectl helm golangci-lint provider-hcloud etcd controller-gen crd-ref-docs"}

export GOWORK=off CGO_ENABLED=0
unset GOFLAGS

# The tools are linked with -s -w (no symbol table, no DWARF), so the compiler need not
# write DWARF either: -dwarf=false changes no binary's code and saves build CPU and cache
# (docs/development.md, "Tool build cost"). Not for karpenter-kwok, which shares the
# project's build cache.
nodwarf=-gcflags=all=-dwarf=false

host_arch=$(go env GOARCH)
arch=${TOOLS_ARCH:-$host_arch}
root=$FULFILLER_CACHE/tools
src=$FULFILLER_CACHE/src
bin=$root/bin
if [ "$arch" != "$host_arch" ]; then
  root=$root/linux-$arch
  bin=$root/bin
  for tool in $TOOLS; do
    case $tool in
      tofu|provider-*) ;;
      *) printf 'tools: %s is not cross-compiled (TOOLS_ARCH=%s): only tofu and the providers are\n' "$tool" "$arch" >&2; exit 2 ;;
    esac
  done
fi
export GOOS=linux GOARCH=$arch
providers=$root/providers
mkdir -p "$root" "$src" "$bin" "$providers"

log() { printf 'tools: %s\n' "$*" >&2; }

trap 'rm -f "$root"/*.tmp.$$ "$root"/*.tmp.$$.*' EXIT

version_of() {
  case $1 in
    tofu) echo "$TOFU_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    controller-gen) echo "$CONTROLLER_GEN_VERSION" ;;
    crd-ref-docs) echo "$CRD_REF_DOCS_VERSION" ;;
    golangci-lint) echo "$GOLANGCI_LINT_VERSION" ;;
    provider-hcloud) echo "$HCLOUD_PROVIDER_VERSION" ;;
    provider-kubectl) echo "$KUBECTL_PROVIDER_VERSION" ;;
    karpenter-kwok) echo "$KARPENTER_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubeadm) echo "$K8S_VERSION" ;;
    *) log "unknown tool $1"; return 1 ;;
  esac
}

# module_dir MOD@VER: downloads a module through the proxy and prints its (read-only) folder.
module_dir() {
  (cd / && go mod download -json "$1") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# writable_copy MOD@VER NAME: a writable copy of a module's source under $src.
writable_copy() {
  local dir dest=$src/$2
  dir=$(module_dir "$1")
  [ -n "$dir" ] || { log "module $1 has no source folder"; return 1; }
  if [ ! -f "$dest/.complete" ]; then
    rm -rf "$dest"
    mkdir -p "$(dirname "$dest")"
    cp -r "$dir" "$dest.tmp.$$"
    chmod -R u+w "$dest.tmp.$$"
    mv "$dest.tmp.$$" "$dest"
    touch "$dest/.complete"
  fi
  printf '%s\n' "$dest"
}

build_tofu() {
  local dir
  dir=$(writable_copy "github.com/opentofu/opentofu@v$TOFU_VERSION" "opentofu-$TOFU_VERSION")
  (cd "$dir" && GOFLAGS=-mod=mod go build -trimpath "$nodwarf" \
    -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$1" ./cmd/tofu)
}

build_etcd() {
  local dir
  dir=$(writable_copy "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" "etcd-server-$ETCD_VERSION")
  (cd "$dir" &&
    for r in go.etcd.io/etcd/api/v3 go.etcd.io/etcd/client/pkg/v3 go.etcd.io/etcd/client/v3 go.etcd.io/etcd/pkg/v3; do
      go mod edit -dropreplace "$r"
    done &&
    GOFLAGS=-mod=mod go build -trimpath "$nodwarf" -ldflags "-s -w" -o "$1" .)
}

k8s_source() {
  local dir minor
  dir=$(writable_copy "k8s.io/kubernetes@v$K8S_VERSION" "kubernetes-$K8S_VERSION")
  if [ ! -f "$dir/.replaced" ]; then
    minor=${K8S_VERSION#*.}
    rm -f "$dir/go.work" "$dir/go.work.sum"
    (cd "$dir" &&
      for m in $(go mod edit -json | sed -n 's/^[[:space:]]*"Path": "\(k8s.io\/[^"]*\)"$/\1/p' | sort -u); do
        if grep -q "$m => ./staging/src/$m\$" go.mod; then
          go mod edit -replace "$m=$m@v0.$minor"
        fi
      done &&
      GOFLAGS=-mod=mod go mod download) >&2
    touch "$dir/.replaced"
  fi
  printf '%s\n' "$dir"
}

build_k8s() { # build_k8s OUT CMD
  local dir p ld="-s -w" date
  dir=$(k8s_source)
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=${K8S_VERSION%%.*}"
    ld+=" -X $p.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION") -X $p.gitTreeState=clean -X $p.buildDate=$date"
  done
  (cd "$dir" && GOFLAGS=-mod=mod go build -trimpath "$nodwarf" -ldflags "$ld" -o "$1" "./cmd/$2")
}

build_helm() {
  local dir kminor
  dir=$(module_dir "helm.sh/helm/v3@v$HELM_VERSION")
  kminor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$dir/go.mod" | head -1)
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ld+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kminor"
  done
  go_install "$1" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" "$ld"
}

# go_install OUT PACKAGE@VERSION [LDFLAGS]: `go install` of a main package into OUT.
go_install() {
  local gobin
  gobin=$(mktemp -d)
  (cd / && GOBIN=$gobin go install -trimpath "$nodwarf" -ldflags "${3:--s -w}" "$2")
  mv "$gobin/$(basename "${2%@*}")" "$1"
  rmdir "$gobin"
}

build_controller_gen() {
  go_install "$1" "sigs.k8s.io/controller-tools/cmd/controller-gen@v$CONTROLLER_GEN_VERSION"
}

# build_crd_ref_docs OUT: the generator of docs/reference/api.md (make api-docs), which reads
# the API's Go types and their markers.
build_crd_ref_docs() {
  go_install "$1" "github.com/elastic/crd-ref-docs@v$CRD_REF_DOCS_VERSION"
}

# build_golangci_lint OUT: the linter of `make lint`, built with the Go version the project's
# go.mod names: the linter refuses code of a newer Go than the one it was built with.
build_golangci_lint() {
  local go_version
  go_version=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$(dirname "$0")/../go.mod")
  GOTOOLCHAIN=go$go_version go_install "$1" "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$GOLANGCI_LINT_VERSION"
}

# build_provider OUT MODULE VERSION [LDFLAGS]: a provider's main package at its module root,
# built in a writable copy (`go install MODULE@VERSION` would read the module's version list,
# which the proxy refuses for these modules, although it serves the exact versions).
build_provider() {
  local dir
  dir=$(writable_copy "$2@v$3" "$(basename "$2")-$3")
  (cd "$dir" && GOFLAGS=-mod=mod go build -trimpath "$nodwarf" -ldflags "-s -w ${4:-}" -o "$1" .)
}

build_provider_hcloud() {
  # The checksum database has no entry for this module (its dependencies verify normally).
  GONOSUMDB=github.com/hetznercloud build_provider "$1" github.com/hetznercloud/terraform-provider-hcloud \
    "$HCLOUD_PROVIDER_VERSION" "-X github.com/hetznercloud/terraform-provider-hcloud/hcloud.Version=$HCLOUD_PROVIDER_VERSION"
}

build_provider_kubectl() {
  build_provider "$1" github.com/gavinbunney/terraform-provider-kubectl "$KUBECTL_PROVIDER_VERSION"
}

# build_karpenter_kwok OUT: Karpenter's kwok provider (the kwok main package of the core
# module), built in a writable copy like the providers. Karpenter needs Go >= 1.26.9. It is
# built without -trimpath so that it shares the build cache with the project's own builds,
# which compile the same Karpenter and Kubernetes packages.
build_karpenter_kwok() {
  local dir
  dir=$(writable_copy "sigs.k8s.io/karpenter@v$KARPENTER_VERSION" "karpenter-$KARPENTER_VERSION")
  (cd "$dir" && GOTOOLCHAIN=go1.26.9 GOFLAGS=-mod=mod go build -ldflags "-s -w" -o "$1" ./kwok)
}

# build_kwok OUT: the kwok controller, and next to it (OUT.stages.yaml) the stages kwokctl
# runs it with by default, taken from the same source.
build_kwok() {
  local dir stage
  dir=$(writable_copy "sigs.k8s.io/kwok@v$KWOK_VERSION" "kwok-$KWOK_VERSION")
  (cd "$dir" && GOFLAGS=-mod=mod go build -trimpath "$nodwarf" \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" -o "$1" ./cmd/kwok)
  : >"$1.stages.yaml"
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    { echo "---"; cat "$dir/kustomize/stage/$stage.yaml"; } >>"$1.stages.yaml"
  done
}

# mirror_provider TOOL NAMESPACE TYPE: links a built provider into the filesystem mirror.
mirror_provider() {
  local version dir
  version=$(version_of "$1")
  dir=$providers/registry.opentofu.org/$2/$3/$version/$(go env GOOS)_$(go env GOARCH)
  mkdir -p "$dir"
  ln -sfn "$root/$1-$version" "$dir/terraform-provider-${3}_v$version"
}

# build_one TOOL: builds TOOL unless its version is cached, checks that it runs (or, for
# another architecture, what it was built for), and links it into bin (or the mirror). The
# build's own output goes to $root/logs/TOOL.log, printed if the build fails.
build_one() {
  local tool=$1 version out tmp start buildlog said
  version=$(version_of "$tool")
  out=$root/$tool-$version
  if [ -x "$out" ]; then
    log "$tool $version cached"
  else
    log "building $tool $version"
    start=$SECONDS
    tmp=$out.tmp.$$
    buildlog=$root/logs/$tool.log
    mkdir -p "$root/logs"
    # In the background and waited for, so that errexit holds inside the build (it would not
    # in a subshell that is itself a condition).
    # Each tool has its build_<tool> function (dashes as underscores); the Kubernetes tools
    # share build_k8s.
    (
      case $tool in
        kube-*|kubectl|kubeadm) build_k8s "$tmp" "$tool" ;;
        *) "build_${tool//-/_}" "$tmp" ;;
      esac
    ) >"$buildlog" 2>&1 &
    if ! wait $!; then
      cat "$buildlog" >&2
      log "FAILED while building $tool $version (k8s $K8S_VERSION, etcd $ETCD_VERSION, tofu $TOFU_VERSION, helm $HELM_VERSION, controller-gen $CONTROLLER_GEN_VERSION, crd-ref-docs $CRD_REF_DOCS_VERSION, golangci-lint $GOLANGCI_LINT_VERSION, karpenter $KARPENTER_VERSION, kwok $KWOK_VERSION; log: $buildlog)"
      return 1
    fi
    if [ "$arch" != "$host_arch" ]; then
      # A binary of another architecture cannot run here: check what its build info says.
      go version -m "$tmp" | grep -q "GOARCH=$arch\$" || { log "$tool $version was not built for $arch"; return 1; }
    else case $tool in
      # A plugin only answers its host's handshake; run alone, it says so and exits 1.
      provider-*) said=$("$tmp" 2>&1 || true); grep -q "plugin" <<<"$said" || { log "$tool $version was built but does not run"; return 1; } ;;
      # An operator: without a cluster it can only show its flags.
      karpenter-kwok) said=$("$tmp" --help 2>&1 || true); grep -q -- "-instance-types-file-path" <<<"$said" || { log "$tool $version was built but does not run"; return 1; } ;;
      *) "$tmp" version --client >/dev/null 2>&1 || "$tmp" version >/dev/null 2>&1 || "$tmp" --version >/dev/null 2>&1 ||
        { log "$tool $version was built but does not run"; return 1; } ;;
    esac; fi
    if [ -f "$tmp.stages.yaml" ]; then mv "$tmp.stages.yaml" "$out.stages.yaml"; fi
    mv "$tmp" "$out"
    log "built $tool $version for $arch in $((SECONDS - start))s"
  fi
  case $tool in
    provider-hcloud) mirror_provider "$tool" hetznercloud hcloud ;;
    provider-kubectl) mirror_provider "$tool" gavinbunney kubectl ;;
    kwok) ln -sfn "../$tool-$version" "$bin/$tool" && ln -sfn "../$tool-$version.stages.yaml" "$bin/kwok-stages.yaml" ;;
    *) ln -sfn "../$tool-$version" "$bin/$tool" ;;
  esac
}

# build_lane TOOL...: builds tools one after another, in the background (errexit stops it
# at the first failure).
build_lane() {
  local tool
  for tool in "$@"; do build_one "$tool"; done
}

# The tools build in lanes, TOOLS_JOBS (default 2) at a time: a build waits on the module
# proxy and links on one core for much of its time, which another build fills. The Kubernetes
# tools share one lane, in order, because they compile the same packages of one source tree
# (the second finds them in the build cache); every other tool is a lane of its own, and the
# longest lanes start first.
k8s_lane=() lanes=()
for tool in $TOOLS; do
  version_of "$tool" >/dev/null
  case $tool in
    kube-*|kubectl|kubeadm) k8s_lane+=("$tool") ;;
    *) lanes+=("$tool") ;;
  esac
done
if [ ${#k8s_lane[@]} -gt 0 ]; then lanes=("${k8s_lane[*]}" "${lanes[@]}"); fi

total_start=$SECONDS
jobs_max=${TOOLS_JOBS:-2}
[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || { log "TOOLS_JOBS=$jobs_max: want a number of builds at a time, 1 or more"; exit 2; }
failed=0
for lane in "${lanes[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || failed=1; done
  [ $failed -eq 0 ] || break
  # shellcheck disable=SC2086 # a lane is a list of tool names
  build_lane $lane &
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
if [ $failed -ne 0 ]; then
  log "a tool failed to build (see above); the tools that were built are cached"
  exit 1
fi

# The CLI configuration that installs providers from the mirror only: no registry, no network,
# no writable plugin cache shared between parallel `tofu init`s.
cat >"$root/tofurc.tmp.$$" <<TOFURC
provider_installation {
  filesystem_mirror {
    path    = "$providers"
    include = ["*/*/*"]
  }
}
TOFURC
mv "$root/tofurc.tmp.$$" "$root/tofurc"
log "all tools ready in $((SECONDS - total_start))s"
printf '%s\n' "$bin"
