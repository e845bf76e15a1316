#!/usr/bin/env bash
# Copyright The fulfiller Authors.
# SPDX-License-Identifier: Apache-2.0
#
# make test's suites, after the tools, vet, lint and the generated files: the unit and
# controller tests with the race detector, then the suites under test/ without it.
#
# The image's other architecture (tofu and the providers cross-compiled for it, `make
# image-tools`) is needed only by test/image. It builds in the background at the lowest
# priority while the race run and the other suites go on, on the CPU they leave idle: their
# control planes, tofu runs and machines wait more than they compute (about 40 % of two cores
# idle over a warm `make test`, docs/development.md). test/image starts as soon as those
# tools are there, beside the other suites. With the tools cached, the build is a no-op.
#
#   GO_TEST_FLAGS RACE_PACKAGES SOAK_DURATION   as the Makefile sets them
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "$0")/.."
: "${FULFILLER_CACHE:?}" "${RACE_PACKAGES:?}"
read -r -a test_flags <<<"${GO_TEST_FLAGS:--count=1 -timeout=30m}"
read -r -a race_packages <<<"$RACE_PACKAGES"
logs=$FULFILLER_CACHE/tools/logs
mkdir -p "$logs"

# Each background job runs in a process group of its own (job control), so that whatever
# ends this script ends the job and everything it started.
set -m
# shellcheck disable=SC2317 # called by the trap
stop_jobs() {
  local pid
  for pid in $(jobs -pr); do
    kill -- "-$pid" 2>/dev/null || true
  done
}
trap stop_jobs EXIT

image_tools_log=$logs/image-tools.make.log
nice -n 19 make --no-print-directory image-tools >"$image_tools_log" 2>&1 &
image_tools=$!

go test "${test_flags[@]}" -race "${race_packages[@]}"

mapfile -t suites < <(go list ./test/... | grep -v '/test/image$')
SOAK_SEED='' go test "${test_flags[@]}" "${suites[@]}" &
others=$!

status=0
if wait "$image_tools"; then
  go test "${test_flags[@]}" ./test/image/ || status=1
else
  echo "make image-tools failed (test/image needs it); its output:" >&2
  cat "$image_tools_log" >&2
  status=1
fi
wait "$others" || status=1
exit "$status"
