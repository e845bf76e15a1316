#!/bin/sh
# fulfiller-mirror-providers MODULES_DIR MIRROR_DIR
#
# Puts every provider that the modules in MODULES_DIR/*/ require into the filesystem mirror
# MIRROR_DIR (`tofu providers mirror`), for this machine's platform, downloading them from
# their registries. The image runs it at build time; an image built FROM it runs it again after
# copying its own modules (as root, before switching back to the image's user).
# With FULFILLER_PROVIDER_SOURCE (a filesystem mirror, unpacked layout) nothing is downloaded:
# the providers are copied from there.
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
  if [ -n "${FULFILLER_PROVIDER_SOURCE:-}" ]; then
    # Take the providers from a filesystem mirror (hack/tools.sh builds one) instead of their
    # registries: `tofu init` installs them from it into a scratch copy of the module, in the
    # unpacked layout a filesystem mirror has.
    work=$(mktemp -d)
    printf 'provider_installation {\n  filesystem_mirror {\n    path = "%s"\n  }\n}\n' "$FULFILLER_PROVIDER_SOURCE" >"$work/tofurc"
    cp -r "$dir" "$work/module"
    (cd "$work/module" && rm -rf .terraform && TF_CLI_CONFIG_FILE="$work/tofurc" CHECKPOINT_DISABLE=1 tofu init -backend=false -input=false >/dev/null)
    if [ -d "$work/module/.terraform/providers" ]; then
      find "$work/module/.terraform/providers" -name '*.lock' -type f -delete
      cp -RL "$work/module/.terraform/providers/." "$mirror/"
    fi
    rm -rf "$work"
    continue
  fi
  # Ignore any CLI configuration here: this is the one place that downloads.
  (cd "$dir" && TF_CLI_CONFIG_FILE=/dev/null CHECKPOINT_DISABLE=1 tofu providers mirror "$mirror")
done
chmod -R a+rX "$mirror"
