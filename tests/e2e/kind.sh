#!/usr/bin/env bash
# The end-to-end tests (tests/cluster/) on a kind cluster: every one of them, on the cluster
# the test command brings up (docs/cluster.md).
#
# Two ways to run it:
# - Where kind is usual (docker, or KIND_EXPERIMENTAL_PROVIDER=podman, and a registry): as is.
#   It builds the product's image from the Dockerfile, pulls postgres:15-alpine and busybox,
#   and creates the cluster from kind's public node image. The tests about the tier's own
#   isolation (network::, which read the links and routes of the namespace they run in and need
#   PE_CLUSTER_BRIDGE) and cluster DNS without upstream need the tier's namespaces and addons;
#   KIND_TESTS picks the tests to run (cargo test filters) where they are not wanted.
# - Here (no registry): `scripts/test.sh kind` runs it inside scripts/kind.sh's namespaces,
#   with these set (each may also be set by hand):
#     KIND_NODE_IMAGE      the node image (scripts/kind.sh builds one from the components here)
#     KIND_CONFIG          kind's cluster configuration (scripts/kind/cluster.yaml: the
#                          admission plugins a production cluster runs)
#     KIND_ADDONS          manifests applied once the cluster is up, each waited for (here:
#                          NetworkPolicy's enforcer, scripts/kind/network-policy.yaml, and
#                          CoreDNS without upstream, scripts/kind/coredns.yaml)
#     KIND_API_SERVER=node the tests reach the API server at the node's address rather than
#                          the port kind publishes
#     PE_IMAGE, PE_NEXT_IMAGE, PE_POSTGRES_IMAGE   the images' names, and
#     PE_IMAGE_ARCHIVES    the docker-archives that hold them (`kind load image-archive`)
#
# Needs kind, kubectl, go and cargo (and docker where PE_IMAGE is not set; podman for the fault
# test, which stops the database's process through the node's runtime); helm comes from
# tools/build.sh. KEEP_CLUSTER=1 keeps the cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-package-executor-e2e}
PROVIDER=${KIND_EXPERIMENTAL_PROVIDER:-docker}

for tool in kind kubectl go cargo; do
  command -v "$tool" >/dev/null || { echo "missing $tool: install it to run this test" >&2; exit 2; }
done

helm_dir=$(./tools/build.sh helm)
export PATH="$helm_dir:$PATH"
cargo build --locked --test cluster --test it

# The images: the archives given, or built and pulled here.
if [ -z "${PE_IMAGE:-}" ]; then
  command -v docker >/dev/null || { echo "missing docker: set PE_IMAGE and PE_IMAGE_ARCHIVES instead" >&2; exit 2; }
  PE_IMAGE=package-executor:dev
  docker build -t "$PE_IMAGE" .
  docker build -t package-executor:next --build-arg CARGO_FEATURES=next-schema . ||
    echo "the next-schema build failed: the upgrade tests will fail" >&2
  PE_NEXT_IMAGE=package-executor:next
  PE_POSTGRES_IMAGE=${PE_POSTGRES_IMAGE:-postgres:15-alpine}
  docker pull "$PE_POSTGRES_IMAGE"
  docker pull busybox:stable
  docker tag busybox:stable example.local/busybox:1
  LOAD=(docker-image "$PE_IMAGE" "$PE_NEXT_IMAGE" "$PE_POSTGRES_IMAGE" example.local/busybox:1)
else
  read -r -a archives <<<"${PE_IMAGE_ARCHIVES:?PE_IMAGE_ARCHIVES names the archives of PE_IMAGE and the others}"
  LOAD=(image-archive "${archives[@]}")
fi
export PE_IMAGE PE_NEXT_IMAGE PE_POSTGRES_IMAGE

create=(kind create cluster --name "$CLUSTER" --wait 180s)
[ -z "${KIND_NODE_IMAGE:-}" ] || create+=(--image "$KIND_NODE_IMAGE")
[ -z "${KIND_CONFIG:-}" ] || create+=(--config "$KIND_CONFIG")
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  started=$SECONDS
  "${create[@]}"
  echo "kind created $CLUSTER in $((SECONDS - started)) s"
fi
trap '[ "${KEEP_CLUSTER:-0}" = 1 ] || kind delete cluster --name "$CLUSTER"' EXIT
for what in "${LOAD[@]:1}"; do
  kind load "${LOAD[0]}" "$what" --name "$CLUSTER"
done

export KUBECONFIG
KUBECONFIG=$(mktemp)
if [ "${KIND_API_SERVER:-}" = node ]; then
  node_ip=$("$PROVIDER" inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' \
    "$CLUSTER-control-plane")
  kind get kubeconfig --internal --name "$CLUSTER" |
    sed "s|server: https://$CLUSTER-control-plane:6443|server: https://$node_ip:6443|" >"$KUBECONFIG"
else
  kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
fi
kubectl version
for addon in ${KIND_ADDONS:-}; do
  kubectl apply -f "$addon"
done
# An addon may change CoreDNS's Corefile: its pods start again on the one applied.
[ -z "${KIND_ADDONS:-}" ] || kubectl -n kube-system rollout restart deployment/coredns
# Every workload of the cluster ready: kind's own, the node image's storage provisioner, and the
# addons'.
kubectl get deployments,daemonsets --all-namespaces \
  -o jsonpath='{range .items[*]}{.metadata.namespace} {.kind}/{.metadata.name}{"\n"}{end}' |
  while read -r namespace workload; do
    kubectl -n "$namespace" rollout status "$workload" --timeout=180s
  done

export PE_CHART_RENDERS
PE_CHART_RENDERS=$(mktemp -d)
# The chart tests again, keeping every render they make for the API server's judgement
# (tests/cluster/renders.rs); their output only if they fail.
renders_log=$(mktemp)
cargo test --locked --test it -- chart:: commands::trigger >"$renders_log" 2>&1 || {
  cat "$renders_log"
  exit 1
}
echo "kept $(ls "$PE_CHART_RENDERS" | wc -l) distinct chart renders for the API server"
# shellcheck disable=SC2086
cargo test --locked --test cluster -- --ignored --test-threads=2 ${KIND_TESTS:-}
echo "kind e2e passed on $(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
