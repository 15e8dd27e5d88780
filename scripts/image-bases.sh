#!/usr/bin/env bash
# Makes the two base images that the image test builds the real Dockerfile on, from Debian's
# packages, for machines that reach no container registry (the Dockerfile's defaults are the
# public `rust:` and distroless images; only these two build arguments change):
#
#   localhost/pe-build-base:<key>    Debian bookworm (debootstrap minbase) with gcc, the machine's
#                                    own Rust toolchain (no toolchain can be downloaded) and the
#                                    machine's CA bundle (cargo reaches the registry through it)
#   localhost/pe-runtime-base:<key>  what distroless `cc` holds: glibc, libgcc, CA certificates,
#                                    /etc/passwd and /etc/group with nonroot (65532); no shell
#
# Both are cached in podman's storage under .tools/containers, keyed by the toolchain's version
# and this script's own digest, so a warm run makes nothing. Prints the two image names.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/image-env.sh
image_tools_install

sysroot=$(rustc --print sysroot)
rust_version=$(rustc --version | awk '{print $2}')
key="$rust_version-$(sha256sum scripts/image-bases.sh | cut -c1-12)"
build_image="localhost/pe-build-base:$key"
runtime_image="localhost/pe-runtime-base:$key"

if podman image exists "$build_image" && podman image exists "$runtime_image"; then
  echo "$build_image $runtime_image"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pe-bases.XXXXXX")
trap 'rm -rf "$work"' EXIT
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
mirror=${mirror:-http://deb.debian.org/debian}

echo "debootstrap bookworm from $mirror (about a minute)" >&2
debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates \
  bookworm "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 20 "$work/debootstrap.log" >&2
  exit 1
}

# The build base: the root with the machine's toolchain (without its documentation) and CA
# bundle.
mkdir -p "$work/root/usr/local/rust" "$work/root/usr/local/cargo"
cp -a "$sysroot/bin" "$sysroot/lib" "$work/root/usr/local/rust/"
[ -d "$sysroot/libexec" ] && cp -a "$sysroot/libexec" "$work/root/usr/local/rust/"
cp /etc/ssl/certs/ca-certificates.crt "$work/root/etc/ssl/certs/ca-certificates.crt"
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/usr/share/doc" "$work/root/usr/share/man"
tar -C "$work/root" -c . | podman import --quiet \
  --change 'ENV PATH=/usr/local/rust/bin:/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV CARGO_HOME=/usr/local/cargo' \
  --change 'ENV RUSTUP_TOOLCHAIN=' \
  - "$build_image" >/dev/null

# The runtime base: only what distroless cc has, taken from the same root.
rt="$work/runtime"
mkdir -p "$rt/etc/ssl/certs" "$rt/lib64" "$rt/usr/lib/x86_64-linux-gnu" "$rt/tmp" "$rt/home/nonroot"
chmod 1777 "$rt/tmp"
for lib in libc.so.6 libm.so.6 libgcc_s.so.1 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 \
  libnss_dns.so.2 libnss_files.so.2; do
  [ -e "$work/root/usr/lib/x86_64-linux-gnu/$lib" ] &&
    cp -L "$work/root/usr/lib/x86_64-linux-gnu/$lib" "$rt/usr/lib/x86_64-linux-gnu/"
done
cp -L "$work/root/lib64/ld-linux-x86-64.so.2" "$rt/lib64/"
ln -s usr/lib "$rt/lib"
cp -L "$work/root/etc/ssl/certs/ca-certificates.crt" "$rt/etc/ssl/certs/"
cat >"$rt/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$rt/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
printf 'hosts: files dns\n' >"$rt/etc/nsswitch.conf"
chown 65532:65532 "$rt/home/nonroot"
tar -C "$rt" -c . | podman import --quiet - "$runtime_image" >/dev/null

echo "$build_image $runtime_image"
