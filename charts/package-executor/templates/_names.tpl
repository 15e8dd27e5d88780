{{/* The names of the chart's objects and accounts, their labels, and the publication id. Every
helper is called one way: with the chart's root context ($ or .), or, when it needs more, with
(dict "root" $ "<argument>" …), its arguments named. */}}

{{/* The base of every object's name: fullnameOverride, else `<release>-<nameOverride or the
chart's name>`, made a DNS-1035 label, which every name the chart derives from it must be
(Service names are DNS-1035 labels; a StatefulSet's and an Indexed Job's pods' host names DNS
labels): a character other than a-z, 0-9 and "-" (a release name's ".") becomes "-", and a
name that does not start with a letter (release "1pe") gets "pe-" in front. At most 52
characters (a CronJob's name; its Jobs add 11). */}}
{{- define "pe.fullname" -}}
{{- $name := .Values.fullnameOverride | default (printf "%s-%s" .Release.Name (.Values.nameOverride | default .Chart.Name)) -}}
{{- $name = regexReplaceAll "[^a-z0-9-]" (lower $name) "-" -}}
{{- if not (regexMatch "^[a-z]" $name) -}}
{{- $name = printf "pe-%s" $name -}}
{{- end -}}
{{- $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* A name with a suffix, within a limit: (dict "root" $ "suffix" "…" "limit" N). The full
name is cut so that the suffix always fits: 63 for most objects, 52 for a CronJob (its Jobs get
11 more characters) and a StatefulSet (its pods' revision label does). The objects' names below
call it; templates call those. */}}
{{- define "pe.name" -}}
{{- $base := include "pe.fullname" .root | trunc (int (sub (int .limit) (add1 (len .suffix)))) | trimSuffix "-" -}}
{{- printf "%s-%s" $base .suffix -}}
{{- end -}}

{{/* The recovery template CronJob (a CronJob: 52). */}}
{{- define "pe.recoveryName" -}}
{{- include "pe.name" (dict "root" . "suffix" "recovery" "limit" 52) -}}
{{- end -}}

{{/* The migration hook Job. */}}
{{- define "pe.migrateName" -}}
{{- include "pe.name" (dict "root" . "suffix" "migrate" "limit" 63) -}}
{{- end -}}

{{/* The admission policy on trigger's Jobs, and its binding: cluster-scoped, so the namespace
is part of the name. */}}
{{- define "pe.triggerPolicyName" -}}
{{- $base := printf "%s-%s" (include "pe.fullname" .) .Release.Namespace -}}
{{- if gt (len $base) 50 -}}
{{- /* Too long for a 63-character name: cut, and kept apart from any other by a digest. */ -}}
{{- $base = printf "%s-%s" ($base | trunc 43 | trimSuffix "-") ($base | sha256sum | trunc 6) -}}
{{- end -}}
{{- printf "%s-trigger-jobs" $base -}}
{{- end -}}

{{/* `helm test`'s pod. */}}
{{- define "pe.testName" -}}
{{- include "pe.name" (dict "root" . "suffix" "test" "limit" 63) -}}
{{- end -}}

{{/* The check before a rollback to this release. */}}

{{- define "pe.rollbackCheckName" -}}
{{- include "pe.name" (dict "root" . "suffix" "rollback-check" "limit" 63) -}}
{{- end -}}

{{/* This release's trigger hook Job: one per revision. */}}
{{- define "pe.releaseHookName" -}}
{{- include "pe.name" (dict "root" . "suffix" (printf "release-%d" .Release.Revision) "limit" 63) -}}
{{- end -}}

{{/* trigger's account, Role and RoleBinding. */}}
{{- define "pe.triggerName" -}}
{{- include "pe.name" (dict "root" . "suffix" "trigger" "limit" 63) -}}
{{- end -}}

{{/* The development database's objects (a StatefulSet: 52), its Secret, Service and policy. */}}
{{- define "pe.postgresqlName" -}}
{{- include "pe.name" (dict "root" . "suffix" "postgresql" "limit" 52) -}}
{{- end -}}

{{/* The Grafana dashboard's ConfigMap. */}}
{{- define "pe.dashboardName" -}}
{{- include "pe.name" (dict "root" . "suffix" "dashboard" "limit" 63) -}}
{{- end -}}

{{/* The sweep CronJob's name. The CronJob controller names its Jobs `<cronjob>-<minutes since
the epoch>` (8 digits until the 2160s; getJobName in kubernetes/pkg/controller/cronjob/utils.go),
and an Indexed Job's last pod is `<job>-<shards - 1>`, which the API server requires to be a DNS
label of at most 63 characters (ValidateJob in pkg/apis/batch/validation): so at most 52 (the
API's CronJob limit), and 53 minus the last index's digits with shards. */}}
{{- define "pe.sweepName" -}}
{{- include "pe.name" (dict "root" . "suffix" "sweep" "limit" (min 52 (sub 54 (int (include "pe.podSuffixLen" .))))) -}}
{{- end -}}

{{/* What an Indexed Job's pods add to its name: `-<shards - 1>` with shards, else nothing
(k8s::job::pod_suffix_len is the same rule for the Jobs trigger makes). */}}
{{- define "pe.podSuffixLen" -}}
{{- if gt (int .Values.run.shards) 1 -}}
{{- add1 (len (toString (sub (int .Values.run.shards) 1))) -}}
{{- else -}}
0
{{- end -}}
{{- end -}}

{{- define "pe.secret" -}}
{{- if or .Values.database.create .Values.postgresql.enabled -}}
{{- include "pe.name" (dict "root" . "suffix" "db" "limit" 63) -}}
{{- else -}}
{{- .Values.database.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* The run pods' account: the chart's own when it makes one, else the one named, else the
namespace's `default` (never a name that nothing creates). */}}
{{- define "pe.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pe.fullname" .) .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else if .Values.rbac.create -}}
{{- fail "serviceAccount.create=false: the chart would bind the run pods' Role (create Events) to the namespace's \"default\" account, which every other pod there runs as. Set serviceAccount.name to an account of the run pods' own, or set rbac.create=false and grant the Roles of templates/rbac.yaml yourself" -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/* The account of `trigger` in the cluster (the release hook, or an operator's own Job): it
may read the recovery template and create Jobs, and holds no database login. The chart makes it
whenever it makes accounts and `trigger` runs in the cluster; otherwise the one named in
serviceAccount.triggerName, else the run pods' account. Whoever can create Jobs in the namespace
can run a pod that mounts the owner's database Secret, so the chart never binds trigger's Role to
an account other pods run as: the namespace's `default` or the run pods' own. */}}
{{- define "pe.triggerServiceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- include "pe.triggerName" . -}}
{{- else -}}
{{- $run := include "pe.serviceAccount" . -}}
{{- $trigger := default $run .Values.serviceAccount.triggerName -}}
{{- if and .Values.rbac.create (or .Values.rbac.triggerInCluster .Values.recovery.onRelease) (or (eq $trigger "default") (eq $trigger $run)) -}}
{{- fail (printf "serviceAccount.create=false: the chart would bind trigger's Role (create Jobs, which can mount the database Secret) to the account %q, which other pods run as. Set serviceAccount.triggerName to an account of trigger's own (not \"default\", not serviceAccount.name), or set rbac.create=false and grant the Roles yourself, or turn off recovery.onRelease and rbac.triggerInCluster" $trigger) -}}
{{- end -}}
{{- $trigger -}}
{{- end -}}
{{- end -}}

{{/* `<chart>-<version>` as a label value: `+` (SemVer build metadata) is not allowed in one. */}}
{{- define "pe.chartLabel" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pe.labels" -}}
app.kubernetes.io/name: package-executor
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "pe.chartLabel" . }}
{{- end -}}

{{- define "pe.selector" -}}
app.kubernetes.io/name: package-executor
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* The development PostgreSQL's labels: its own name, part of this release, so a policy can
select it (and the executor's NetworkPolicy, which selects package-executor pods, does not). */}}
{{- define "pe.postgresqlLabels" -}}
app.kubernetes.io/name: postgresql
app.kubernetes.io/part-of: package-executor
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: postgresql
helm.sh/chart: {{ include "pe.chartLabel" . }}
{{- end -}}

{{/* The publication id of this install, upgrade or sync: publicationId when the pipeline sets
one, else `release-<revision>-<digest of the chart's version and every value>`. Helm and Flux
count revisions; Argo CD renders with `helm template`, where the revision is always 1, so the
digest is what tells one sync's configuration from another's: a sync that changes anything
starts a run, and one that changes nothing attaches to the run of the same configuration (and
re-creates it if it failed: the hook passes --replace-failed). */}}
{{- define "pe.publication" -}}
{{- if .Values.publicationId -}}
{{- .Values.publicationId -}}
{{- else -}}
{{- /* Without the values that may hold credentials (database URLs, the development password, a
push URL): the id is readable by anyone who may read Jobs, and a short digest of a password
could be checked against guesses. */ -}}
{{- $values := deepCopy .Values -}}
{{- $_ := unset $values "publicationId" -}}
{{- if $values.database }}{{ $_ = unset $values.database "migrateUrl" }}{{ $_ = unset $values.database "executorUrl" }}{{ end -}}
{{- if $values.postgresql }}{{ $_ = unset $values.postgresql "password" }}{{ end -}}
{{- if $values.metrics }}{{ $_ = unset $values.metrics "pushUrl" }}{{ end -}}
{{- printf "release-%d-%s" .Release.Revision (printf "%s\n%s" .Chart.Version (toJson $values) | sha256sum | trunc 8) -}}
{{- end -}}
{{- end -}}
