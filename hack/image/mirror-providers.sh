#!/bin/sh
# fulfiller-mirror-providers MODULES_DIR MIRROR_DIR
#
# Puts every provider that the modules in MODULES_DIR/*/ require into the filesystem mirror
# MIRROR_DIR (`tofu providers mirror`), for this machine's platform, downloading them from
# their registries. The image runs it at build time; an image built FROM it runs it again after
# copying its own modules (as root, before switching back to the image's user).
set -eu
usage="usage: fulfiller-mirror-providers MODULES_DIR MIRROR_DIR"
modules=${1:?$usage}
mirror=${2:?$usage}
mkdir -p "$mirror"
for dir in "$modules"/*/; do
  # Only folders with configuration files are modules.
  if [ -z "$(find "$dir" -maxdepth 1 \( -name '*.tf' -o -name '*.tofu' -o -name '*.tf.json' \) -print -quit)" ]; then
    continue
  fi
  echo "fulfiller-mirror-providers: $dir"
  # Ignore any CLI configuration here: this is the one place that downloads.
  (cd "$dir" && TF_CLI_CONFIG_FILE=/dev/null CHECKPOINT_DISABLE=1 tofu providers mirror "$mirror")
done
chmod -R a+rX "$mirror"
