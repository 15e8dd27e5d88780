#!/usr/bin/env bash
# Makes the image the chart's development PostgreSQL runs in the test cluster, from Debian's
# PostgreSQL 15 packages as this machine has them (the test command installs them): their
# files, the libraries they load, busybox for a shell, and an entrypoint with the official
# image's interface (postgres-entrypoint.sh), so the chart does not change for it. No registry
# and no container engine: a docker archive (mkimg.py) that `scripts/cluster.sh load` imports.
#
#   scripts/cluster/postgres-image.sh OUT.tar NAME:TAG
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1 name=$2
bindir=$(ls -d /usr/lib/postgresql/15/bin)
root=$(mktemp -d "${TMPDIR:-/tmp}/pe-postgres-image.XXXXXX")
trap 'rm -rf "$root"' EXIT

mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/var/lib/postgresql/data" \
  "$root/var/run/postgresql" "$root/docker-entrypoint-initdb.d" "$root/usr/share"
chmod 1777 "$root/tmp"
chmod 0777 "$root/var/run/postgresql" "$root/var/lib/postgresql/data"
# The server, its client tools, its modules and shared files, and the time zones it reads.
for d in /usr/lib/postgresql/15 /usr/share/postgresql/15 /usr/share/zoneinfo; do
  mkdir -p "$root$(dirname "$d")"
  cp -a "$d" "$root$d"
done
# Not the JIT: it would bring LLVM (over 100 MB), and PostgreSQL runs without it.
rm -rf "$root/usr/lib/postgresql/15/lib/llvmjit"* "$root/usr/lib/postgresql/15/lib/bitcode"
# Every library those load, at the path the dynamic loader looks for it.
{
  find "$root/usr/lib/postgresql/15" -type f \( -perm -u+x -o -name '*.so' \) -print0 |
    sed -z "s|^$root||" | { xargs -0 ldd 2>/dev/null || true; } |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }'
} | sort -u | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
mkdir -p "$root/lib64" "$root/lib/x86_64-linux-gnu"
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
cp /bin/busybox "$root/bin/busybox"
for applet in sh mkdir chmod mktemp rm cat ls printf; do
  ln -s busybox "$root/bin/$applet"
done
cp "$here/postgres-entrypoint.sh" "$root/usr/local-entrypoint.sh"
chmod 0755 "$root/usr/local-entrypoint.sh"
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
postgres:x:70:70:PostgreSQL:/var/lib/postgresql:/bin/sh
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
postgres:x:70:
GROUP
python3 "$here/mkimg.py" "$out" "$name" /usr/local-entrypoint.sh \
  --env=PATH=/usr/lib/postgresql/15/bin:/bin --env=PGDATA=/var/lib/postgresql/data \
  --env=LANG=C --user=70 --stop-signal=SIGINT "$root:/"
