#!/usr/bin/env bash
# Renders manifests/ from the chart: plain YAML for a cluster without Helm, with the development
# PostgreSQL, in namespace package-executor. The chart is the one definition of every Job's spec,
# so these files are never edited by hand; tests/it/chart/manifests.rs fails when they are out of date.
#   scripts/render-manifests.sh [DIR]   (default: manifests)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-manifests}"
helm=helm
[ -x .tools/bin/helm ] && helm=.tools/bin/helm
mkdir -p "$out"
{
  cat <<'HEAD'
# Rendered from charts/package-executor by scripts/render-manifests.sh: do not edit, re-render.
#   kubectl apply -f manifests/00-namespace.yaml -f manifests/10-package-executor.yaml
# Without Helm the hooks are ordinary objects: the migration Job and the release's trigger Job
# start at once (the migration retries until the development PostgreSQL is up; the trigger makes
# the first recovery Job from the suspended template CronJob). After each publication:
#   package-executor trigger --from-cronjob pe-package-executor-recovery \
#     --publication-id ID --namespace package-executor
# The demo fixture, as the control plane would publish it (the labels let the pod through the
# development database's NetworkPolicy):
#   kubectl -n package-executor run import-demo --restart=Never --image=package-executor:dev \
#     --labels=app.kubernetes.io/name=package-executor,app.kubernetes.io/instance=pe \
#     --overrides='{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":65532,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"c","image":"package-executor:dev","args":["sources","import","/usr/share/package-executor/demo-fixture.json"],"env":[{"name":"DATABASE_URL","valueFrom":{"secretKeyRef":{"name":"pe-package-executor-db","key":"migrate-url"}}}],"securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]}}}]}}'
HEAD
  "$helm" template pe charts/package-executor --namespace package-executor \
    --set image.tag=dev --set postgresql.enabled=true --set publicationId=manifests
} >"$out/10-package-executor.yaml"
