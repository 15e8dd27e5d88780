#!/usr/bin/env bash
# End-to-end on a kind cluster, for machines with docker and kind (CI runs the same image and
# the same chart pods with podman instead: tests/image.rs through scripts/test.sh).
#
# Builds the image from the Dockerfile, loads it into kind, installs the chart (not the plain
# manifests) with the bundled development PostgreSQL, imports the demo fixture as the control
# plane would, publishes (a `helm upgrade` runs the recovery Job), and asserts what an operator
# sees: the Job completes, its pod's termination message is the run summary, the Job carries a
# `RunSummary` Event, and every demo project but the rejected one is current.
# Needs docker, kind, kubectl and helm: `tests/e2e/kind.sh` (KEEP_CLUSTER=1 keeps the cluster).
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-package-executor-e2e}
NS=package-executor
RELEASE=pe
IMAGE_REPO=package-executor
IMAGE_TAG=dev
IMAGE="$IMAGE_REPO:$IMAGE_TAG"

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "missing $tool: install it to run this test" >&2; exit 2; }
done

docker build -t "$IMAGE" .
if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --wait 120s
fi
trap '[ "${KEEP_CLUSTER:-0}" = 1 ] || kind delete cluster --name "$CLUSTER"' EXIT
kind load docker-image "$IMAGE" --name "$CLUSTER"
k() { kubectl --context "kind-$CLUSTER" -n "$NS" "$@"; }
h() { helm --kube-context "kind-$CLUSTER" -n "$NS" "$@"; }

values=(
  --set "image.repository=$IMAGE_REPO" --set "image.tag=$IMAGE_TAG"
  --set postgresql.enabled=true --set migration.createRoles=true
  --set database.existingSecret=
)
h upgrade --install "$RELEASE" charts/package-executor --create-namespace "${values[@]}" \
  --set publicationId=e2e-install --wait --timeout 10m

# The control plane publishes: the demo fixture, imported with the owner's URL from the Secret.
secret=$(k get secret -l "app.kubernetes.io/instance=$RELEASE" -o name | grep -- '-db$' | head -n 1)
k delete pod import-demo --ignore-not-found >/dev/null
k run import-demo --image="$IMAGE" --restart=Never --image-pull-policy=IfNotPresent \
  --overrides='{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":65532,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"c","image":"'"$IMAGE"'","args":["sources","import","/usr/share/package-executor/demo-fixture.json"],"env":[{"name":"DATABASE_URL","valueFrom":{"secretKeyRef":{"name":"'"${secret#secret/}"'","key":"migrate-url"}}}],"securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]}}}]}}' >/dev/null
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/import-demo --timeout=180s

# A publication: the upgrade's recovery Job builds what the import marked.
h upgrade "$RELEASE" charts/package-executor "${values[@]}" --set publicationId=e2e-publish \
  --wait --timeout 10m
job=$(k get jobs -l app.kubernetes.io/component=snapshot-recovery \
  --sort-by=.metadata.creationTimestamp -o jsonpath='{.items[-1:].metadata.name}')
k wait --for=condition=complete "job/$job" --timeout=300s || {
  k logs "job/$job" || true
  echo "job $job did not complete" >&2
  exit 1
}

# The termination message of each of its pods is the run summary.
messages=$(k get pods -l "job-name=$job" \
  -o jsonpath='{range .items[*]}{.status.containerStatuses[0].state.terminated.message}{"\n"}{end}')
[ -n "$messages" ] || { echo "no termination message on $job's pods" >&2; exit 1; }
while IFS= read -r message; do
  python3 -c 'import json, sys; s = json.loads(sys.argv[1]); assert s["schema"] == "package-executor/run-summary@v1", s; assert s["exitCode"] == 0, s; print("ok: termination message", s["shard"], "published", s["published"])' "$message"
done <<<"$messages"

# The Job carries the run's Event.
events=$(kubectl --context "kind-$CLUSTER" get events.events.k8s.io -n "$NS" \
  --field-selector "regarding.name=$job,reason=RunSummary" -o jsonpath='{.items[*].note}')
case $events in
  *package-executor/run-summary@v1*) echo "ok: RunSummary Event on $job" ;;
  *) echo "no RunSummary Event on job $job" >&2; exit 1 ;;
esac

# Every demo project but the rejected one is current, read through the executor's login.
check() {
  local project=$1 want=$2
  local pod="check-${project}"
  k delete pod "$pod" --ignore-not-found >/dev/null
  k run "$pod" --image="$IMAGE" --restart=Never --image-pull-policy=IfNotPresent \
    --overrides='{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":65532,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"c","image":"'"$IMAGE"'","args":["current","'"$project"'","--json"],"env":[{"name":"DATABASE_URL","valueFrom":{"secretKeyRef":{"name":"'"${secret#secret/}"'","key":"executor-url"}}}],"securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]}}}]}}' >/dev/null
  for _ in $(seq 60); do
    case $(k get pod "$pod" -o jsonpath='{.status.phase}') in Succeeded|Failed) break ;; esac
    sleep 1
  done
  local code
  code=$(k get pod "$pod" -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')
  if [ "$code" != "$want" ]; then
    echo "current $project exited $code, expected $want" >&2
    k logs "$pod" >&2 || true
    exit 1
  fi
  echo "ok: current $project -> exit $code"
}
check demo-1 0
check demo-2 0
check demo-empty 0
check demo-rejected 4
echo "kind e2e passed"
