#!/usr/bin/env bash
# End-to-end on a kind cluster: build the image, load it, apply manifests/, migrate, import the
# demo fixture, run the recovery Job and check that every demo project that should have a
# current snapshot has one. Needs docker, kind and kubectl; CI has no container engine, so this
# runs on a developer machine: `tests/e2e/kind.sh` (KEEP_CLUSTER=1 keeps the cluster).
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-package-executor-e2e}
NS=package-executor
IMAGE=package-executor:dev

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "missing $tool: install it to run this test" >&2; exit 2; }
done

docker build -t "$IMAGE" .
if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --wait 120s
fi
trap '[ "${KEEP_CLUSTER:-0}" = 1 ] || kind delete cluster --name "$CLUSTER"' EXIT
kind load docker-image "$IMAGE" --name "$CLUSTER"
export KUBECONFIG_CONTEXT="kind-$CLUSTER"
k() { kubectl --context "kind-$CLUSTER" "$@"; }

k apply -f manifests/00-namespace.yaml -f manifests/10-postgres.yaml -f manifests/20-rbac.yaml
k -n "$NS" rollout status statefulset/postgresql --timeout=180s

run_job() {
  local file=$1 name=$2
  k -n "$NS" delete job "$name" --ignore-not-found
  k apply -f "$file"
  if ! k -n "$NS" wait --for=condition=complete "job/$name" --timeout=300s; then
    k -n "$NS" logs "job/$name" || true
    echo "job $name did not complete" >&2
    exit 1
  fi
}
run_job manifests/30-migrate-job.yaml package-executor-migrate
run_job manifests/40-import-demo-job.yaml package-executor-import-demo
run_job manifests/50-recovery-job.yaml package-executor-recovery
k -n "$NS" logs job/package-executor-recovery | tail -n 3

# Every demo project but the rejected one must be current, read through the executor's login.
check() {
  local project=$1 want=$2
  local pod="check-${project}"
  k -n "$NS" delete pod "$pod" --ignore-not-found >/dev/null
  k -n "$NS" run "$pod" --image="$IMAGE" --restart=Never --image-pull-policy=IfNotPresent \
    --overrides='{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":65532,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"c","image":"'"$IMAGE"'","args":["current","'"$project"'","--json"],"env":[{"name":"DATABASE_URL","valueFrom":{"secretKeyRef":{"name":"package-executor-db","key":"executor-url"}}}],"securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]}}}]}}' >/dev/null
  for _ in $(seq 60); do
    case $(k -n "$NS" get pod "$pod" -o jsonpath='{.status.phase}') in Succeeded|Failed) break ;; esac
    sleep 1
  done
  local code
  code=$(k -n "$NS" get pod "$pod" -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')
  if [ "$code" != "$want" ]; then
    echo "current $project exited $code, expected $want" >&2
    k -n "$NS" logs "$pod" >&2 || true
    exit 1
  fi
  echo "ok: current $project -> exit $code"
}
check demo-1 0
check demo-2 0
check demo-empty 0
check demo-rejected 4
echo "kind e2e passed"
