#!/usr/bin/env bash
# The cluster tier's tests (tests/cluster/) on a kind cluster, for machines with docker and kind:
# the same test bodies the test command runs on the cluster scripts/cluster.sh builds from
# Kubernetes' own modules (docs/cluster.md), with kind as the provider.
#
# Builds the image from the Dockerfile, loads it into kind, and runs the chart's end-to-end
# test (install with the development PostgreSQL from the public postgres:15-alpine image,
# import, publish, the recovery Job, the consumer's view), the Job and StatefulSet checks, and
# every chart render through kind's API server. The tests about the local cluster itself (its
# version, its isolated network, its DNS without upstream) are not kind's to pass, nor the fault
# test, which stops the database's process from the node through containerd, nor the owner
# references rule, which needs the OwnerReferencesPermissionEnforcement admission plugin (kind
# runs kubeadm's defaults, without it).
# Needs docker, kind and kubectl; helm comes from tools/build.sh (Go). KEEP_CLUSTER=1 keeps the
# cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-package-executor-e2e}
IMAGE=package-executor:dev

for tool in docker kind kubectl go cargo; do
  command -v "$tool" >/dev/null || { echo "missing $tool: install it to run this test" >&2; exit 2; }
done

helm_dir=$(./tools/build.sh helm)
docker build -t "$IMAGE" .
if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --wait 120s
fi
trap '[ "${KEEP_CLUSTER:-0}" = 1 ] || kind delete cluster --name "$CLUSTER"' EXIT
kind load docker-image "$IMAGE" --name "$CLUSTER"

export KUBECONFIG
KUBECONFIG=$(mktemp)
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
export PATH="$helm_dir:$PATH"
export PE_IMAGE="$IMAGE" PE_POSTGRES_IMAGE=postgres:15-alpine
export PE_CHART_RENDERS
PE_CHART_RENDERS=$(mktemp -d)
cargo test --locked --test it -- chart:: commands::trigger >/dev/null
cargo test --locked --test cluster -- --ignored --test-threads=2 \
  chart::the_chart_installs chart::three_shards chart::upgrade_rollback renders:: \
  rules::the_name rules::the_job smoke::a_job smoke::a_statefulset
echo "kind e2e passed"
