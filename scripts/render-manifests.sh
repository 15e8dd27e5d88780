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
rendered=$("$helm" template pe charts/package-executor --namespace package-executor --skip-tests \
  --set image.tag=dev --set postgresql.enabled=true --set publicationId=manifests \
  --set postgresql.password=dev-only-password --set migration.checkOnRollback=false)
# The Jobs apart from the rest: a Job's pod template cannot change once created, so re-applying a
# changed one fails; they are deleted and created anew instead (the header says how).
split() { # split jobs|rest: the documents that are (not) Jobs
  awk -v want="$1" 'function flush() { if (doc != "" && ((doc ~ /\nkind: Job\n/) == (want == "jobs"))) printf "%s", doc; doc = "" }
    /^---$/ { flush(); doc = "---\n"; next } { doc = doc $0 "\n" } END { flush() }' <<<"$rendered"
}
{
  cat <<'HEAD'
# Rendered from charts/package-executor by scripts/render-manifests.sh: do not edit, re-render.
# Everything but the Jobs; the Jobs are in 20-jobs.yaml. Install, or update after a re-render:
#   kubectl apply -f manifests/00-namespace.yaml -f manifests/10-package-executor.yaml
#   kubectl delete --ignore-not-found -f manifests/20-jobs.yaml
#   kubectl create -f manifests/20-jobs.yaml
# (a Job's pod template is immutable: `kubectl apply` of a changed one is refused). Without Helm
# the hooks are ordinary Jobs: the migration and the release's trigger start at once (the
# migration retries until the development PostgreSQL is up; the trigger makes the first recovery
# Job from the suspended template CronJob). After each publication:
#   package-executor trigger --from-cronjob pe-package-executor-recovery \
#     --publication-id ID --namespace package-executor
# The demo fixture, as the control plane would publish it (the labels let the pod through the
# development database's NetworkPolicy):
#   kubectl -n package-executor run import-demo --restart=Never --image=package-executor:dev \
#     --labels=app.kubernetes.io/name=package-executor,app.kubernetes.io/instance=pe \
#     --overrides='{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":65532,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"c","image":"package-executor:dev","args":["sources","import","/usr/share/package-executor/demo-fixture.json"],"env":[{"name":"DATABASE_URL","valueFrom":{"secretKeyRef":{"name":"pe-package-executor-db","key":"migrate-url"}}}],"securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]}}}]}}'
HEAD
  split rest
} >"$out/10-package-executor.yaml"
{
  cat <<'HEAD'
# Rendered from charts/package-executor by scripts/render-manifests.sh: do not edit, re-render.
# The migration and the release's trigger, as ordinary Jobs. A Job's pod template is immutable,
# so these are deleted and created anew, never applied over the old ones:
#   kubectl delete --ignore-not-found -f manifests/20-jobs.yaml
#   kubectl create -f manifests/20-jobs.yaml
HEAD
  split jobs
} >"$out/20-jobs.yaml"
