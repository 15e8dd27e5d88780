#!/usr/bin/env bash
# The test command: formatting, lints, then every test (unit, property, storage contract on a
# real PostgreSQL server started by the tests, CLI and run tests). Installs the PostgreSQL
# server binaries first when they are missing (Debian/Ubuntu, as root or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  echo "PostgreSQL server binaries not found: installing the postgresql package" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi

cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked --all-targets
