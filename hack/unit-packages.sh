#!/usr/bin/env bash
# Prints the packages `make test-unit` runs: those whose test binary does not link
# internal/controlplane, the package that finds the pinned tools (tofu, etcd, kube-apiserver,
# kubeadm, helm) and starts control planes. Their tests need no `make tools`, no API server
# and no tofu: fakes, stand-ins served in the test process, and the go, sh and git commands.
# A package whose tests start using internal/testenv or internal/controlplane leaves the list
# by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
go list -test -f '{{if eq .Name "main"}}{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{end}}' ./... |
  awk -v cp="$(go list -m)/internal/controlplane" '
    $1 ~ /\.test$/ { for (i = 2; i <= NF; i++) if ($i == cp) next; sub(/\.test$/, "", $1); print $1 }'
