#!/bin/sh
# fulfiller-mirror-providers MODULES_DIR MIRROR_DIR
#
# Makes the filesystem mirror MIRROR_DIR hold every provider that the modules in
# MODULES_DIR/*/ require, for this machine's platform. A module whose providers the mirror
# has already (the image's are built from source by hack/tools.sh and copied in) is left
# alone; for the others the providers are downloaded from their registries (`tofu providers
# mirror`). The image runs it at build time; an image built FROM it runs it again after
# copying its own modules (as root, before switching back to the image's user).
set -eu
usage="usage: fulfiller-mirror-providers MODULES_DIR MIRROR_DIR"
modules=${1:?$usage}
mirror=${2:?$usage}
mkdir -p "$mirror"
mirror=$(cd "$mirror" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Installs from the mirror only, to tell whether it already holds a module's providers.
cat >"$scratch/tofurc" <<TOFURC
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = ["*/*/*"]
  }
}
TOFURC
for dir in "$modules"/*/; do
  # Only folders with configuration files are modules.
  if [ -z "$(find "$dir" -maxdepth 1 \( -name '*.tf' -o -name '*.tofu' -o -name '*.tf.json' \) -print -quit)" ]; then
    continue
  fi
  rm -rf "$scratch/module"
  cp -r "$dir" "$scratch/module"
  rm -rf "$scratch/module/.terraform" "$scratch/module/.terraform.lock.hcl"
  if (cd "$scratch/module" && TF_CLI_CONFIG_FILE="$scratch/tofurc" CHECKPOINT_DISABLE=1 tofu init -input=false -backend=false >/dev/null 2>&1); then
    echo "fulfiller-mirror-providers: $dir: the mirror has its providers"
    continue
  fi
  echo "fulfiller-mirror-providers: $dir"
  # Ignore any CLI configuration here: this is the one place that downloads.
  (cd "$dir" && TF_CLI_CONFIG_FILE=/dev/null CHECKPOINT_DISABLE=1 tofu providers mirror "$mirror")
done
chmod -R a+rX "$mirror"
