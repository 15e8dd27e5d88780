#!/usr/bin/env bash
# Makes the two small images every test cluster needs and no registry gives here, as
# docker-archives (mkimg.py) in OUT: pause.tar (the sandbox, pause.c built static) and
# busybox.tar (Debian's busybox-static with its applets linked, for the tests' pods). Each is
# made once: an archive already in OUT is kept.
#
#   scripts/cluster/base-images.sh OUT PAUSE_NAME:TAG BUSYBOX_NAME:TAG
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1 pause_image=$2 busybox_image=$3
mkdir -p "$out"
if [ ! -f "$out/pause.tar" ]; then
  gcc -Os -static -o "$out/pause" "$here/pause.c"
  strip "$out/pause"
  python3 "$here/mkimg.py" "$out/pause.tar" "$pause_image" /pause "$out/pause"
fi
if [ ! -f "$out/busybox.tar" ]; then
  rm -rf "$out/busybox"
  mkdir -p "$out/busybox/bin" "$out/busybox/tmp"
  chmod 1777 "$out/busybox/tmp"
  cp /bin/busybox "$out/busybox/bin/busybox"
  for applet in $(busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$out/busybox/bin/$applet"
  done
  python3 "$here/mkimg.py" "$out/busybox.tar" "$busybox_image" "" "$out/busybox:/"
fi
