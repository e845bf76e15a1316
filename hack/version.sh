#!/usr/bin/env bash
# Prints the version a build of this tree carries (the binary's `fulfiller version`, the image's
# tag and label): VERSION's semantic version when HEAD is its release tag (v<VERSION>) and the
# tree is clean, otherwise a pre-release of it named after the commit, 0.2.0-dev.<commit>, with
# .dirty when the tree has changes. Two builds of the same tree get the same version.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(tr -d '[:space:]' <VERSION)
if ! commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  echo "$base-dev"
  exit 0
fi
dirty=""
git diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
if [ -z "$dirty" ] && [ "$(git tag --points-at HEAD --list "v$base")" = "v$base" ]; then
  echo "$base"
else
  echo "$base-dev.$commit$dirty"
fi
