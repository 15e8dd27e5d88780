#!/usr/bin/env bash
# Builds the real Dockerfile with podman on bases made from Debian packages
# (scripts/image-bases.sh), with only the two base-image arguments overridden, and prints the
# image's name. The host's cargo registry is mounted into the build, and podman's layer cache
# lives under .tools/containers, so a warm build recompiles only what changed.
#   scripts/image-build.sh [FEATURES]   cargo features of the build (none: the release image;
#                                       `next-schema`: the end-to-end tier's image one migration ahead)
set -euo pipefail
cd "$(dirname "$0")/.."
read -r build runtime < <(./scripts/image-bases.sh)
source scripts/image-env.sh
features="${1:-}"
tag=localhost/package-executor:${features:-test}
registry="${CARGO_HOME:-$HOME/.cargo}/registry"
mkdir -p "$registry"
log="$IMAGE_TOOLS/build.log"
if ! podman build --network host --layers \
  --build-arg RUST_IMAGE="$build" --build-arg RUNTIME_IMAGE="$runtime" \
  --build-arg CARGO_FEATURES="$features" \
  --volume "$registry:/usr/local/cargo/registry" \
  -t "$tag" . >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "the image build failed; the whole log is $log" >&2
  exit 1
fi
echo "$tag"
