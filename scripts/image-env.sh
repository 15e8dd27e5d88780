# Sourced by the image scripts: podman as the image test runs it, with configuration and
# storage of its own under .tools/containers (nothing in /etc is changed, and every layer the
# test builds is cached there between runs).
#
# Debian's podman 4.3 with Debian's runc: crun fails on hybrid cgroups, and podman's default
# ulimits exceed what some machines allow, so both are set here.

IMAGE_TOOLS="${IMAGE_TOOLS:-$PWD/.tools/containers}"
mkdir -p "$IMAGE_TOOLS/storage" "$IMAGE_TOOLS/run"
cat >"$IMAGE_TOOLS/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
cat >"$IMAGE_TOOLS/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$IMAGE_TOOLS/storage"
runroot = "$IMAGE_TOOLS/run"
EOF
export CONTAINERS_CONF="$IMAGE_TOOLS/containers.conf"
export CONTAINERS_STORAGE_CONF="$IMAGE_TOOLS/storage.conf"

# Installs podman, runc and debootstrap from Debian when missing (as root or with sudo).
image_tools_install() {
  local missing=()
  command -v podman >/dev/null 2>&1 || missing+=(podman)
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if ((${#missing[@]})); then
    echo "installing ${missing[*]} (Debian packages) for the image test" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # The mount point image_isolated binds over, made with the packages (before the test command
  # looks at /var/lib), empty and never written.
  if [ "$(id -u)" = 0 ]; then
    mkdir -p /var/lib/containers
  fi
}

# Runs a command with /var/lib/containers bound to $IMAGE_TOOLS/var-lib-containers in a mount
# namespace of its own. Rootful podman keeps its blob-info cache at /var/lib/containers/cache,
# hardwired in containers/image (pkg/blobinfocache) and moved by no configuration file, so this
# is how the image build and test leave /var/lib as it was (and keep that cache with the rest
# under .tools/containers). Rootless podman keeps it under $HOME, and runs the command as is.
image_isolated() {
  if [ "$(id -u)" = 0 ] && [ -d /var/lib/containers ]; then
    mkdir -p "$IMAGE_TOOLS/var-lib-containers"
    unshare --mount --propagation private -- \
      bash -c 'mount --bind "$1" /var/lib/containers && shift && exec "$@"' _ \
      "$IMAGE_TOOLS/var-lib-containers" "$@"
  else
    "$@"
  fi
}
