#!/usr/bin/env bash
# Builds the real Dockerfile with podman on bases made from Debian packages
# (scripts/image-bases.sh), with only the two base-image arguments overridden, and prints the
# image's name. The host's cargo registry is mounted into the build, and podman's layer cache
# lives under .tools/containers, so a warm build recompiles only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r build runtime < <(./scripts/image-bases.sh)
source scripts/image-env.sh
tag=localhost/package-executor:test
registry="${CARGO_HOME:-$HOME/.cargo}/registry"
mkdir -p "$registry"
log="$IMAGE_TOOLS/build.log"
if ! podman build --network host --layers \
  --build-arg RUST_IMAGE="$build" --build-arg RUNTIME_IMAGE="$runtime" \
  --volume "$registry:/usr/local/cargo/registry" \
  -t "$tag" . >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "the image build failed; the whole log is $log" >&2
  exit 1
fi
echo "$tag"
