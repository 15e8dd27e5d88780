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

{{/* A name with a suffix, within a limit: (list $ "suffix" limit). The full name is cut so
that the suffix always fits: 63 for most objects, 52 for a CronJob (its Jobs get 11 more
characters) and a StatefulSet (its pods' revision label does). */}}
{{- define "pe.name" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- $limit := int (index . 2) -}}
{{- $base := include "pe.fullname" $root | trunc (int (sub $limit (add1 (len $suffix)))) | trimSuffix "-" -}}
{{- printf "%s-%s" $base $suffix -}}
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

{{/* The sweep CronJob's name. The CronJob controller names its Jobs `<cronjob>-<minutes since
the epoch>` (8 digits until the 2160s; getJobName in kubernetes/pkg/controller/cronjob/utils.go),
and an Indexed Job's last pod is `<job>-<shards - 1>`, which the API server requires to be a DNS
label of at most 63 characters (ValidateJob in pkg/apis/batch/validation): so at most 52 (the
API's CronJob limit), and 53 minus the last index's digits with shards. */}}
{{- define "pe.sweepName" -}}
{{- include "pe.name" (list . "sweep" (min 52 (sub 54 (int (include "pe.podSuffixLen" .))))) -}}
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
{{- include "pe.name" (list . "trigger" 63) -}}
{{- else -}}
{{- $run := include "pe.serviceAccount" . -}}
{{- $trigger := default $run .Values.serviceAccount.triggerName -}}
{{- if and .Values.rbac.create (or .Values.rbac.triggerInCluster .Values.recovery.onRelease) (or (eq $trigger "default") (eq $trigger $run)) -}}
{{- fail (printf "serviceAccount.create=false: the chart would bind trigger's Role (create Jobs, which can mount the database Secret) to the account %q, which other pods run as. Set serviceAccount.triggerName to an account of trigger's own (not \"default\", not serviceAccount.name), or set rbac.create=false and grant the Roles yourself, or turn off recovery.onRelease and rbac.triggerInCluster" $trigger) -}}
{{- end -}}
{{- $trigger -}}
{{- end -}}
{{- end -}}

{{/* The development database's password as it must stand in a URL's user part: percent-encoded
(urlquery writes a space as "+", which a user part reads as a plus). */}}
{{- define "pe.urlPassword" -}}
{{- .Values.postgresql.password | urlquery | replace "+" "%20" -}}
{{- end -}}

{{- define "pe.secret" -}}
{{- if or .Values.database.create .Values.postgresql.enabled -}}
{{- include "pe.name" (list . "db" 63) -}}
{{- else -}}
{{- .Values.database.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* The image: `repository:tag`, pinned by `@digest` when image.digest is given (the digest
alone decides what runs; the tag stays for people reading the pod). */}}
{{- define "pe.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- with .Values.image.digest }}@{{ . }}{{ end -}}
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

{{/* Memory limit: the bound docs/contract.md states ("Memory"), at the chart's flags:
32 MiB for the process, the revision budget (at least the largest single read, 50 MiB), and
25 MiB per worker for the snapshot it builds. coordinator::memory_bound is the same formula;
tests/it/chart/manifests.rs holds the two equal. */}}
{{- define "pe.memory" -}}
{{- $b := int .Values.run.memoryBudgetMiB -}}
{{- printf "%dMi" (add 32 (max $b 50) (mul (int .Values.run.concurrency) 25)) -}}
{{- end -}}

{{/* A quantity (the schema's pattern: a decimal number and an optional suffix) in its base unit
(bytes, cores), as a float, to compare two of them. */}}
{{- define "pe.quantity" -}}
{{- $q := toString . -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $suffix := trimPrefix $number $q -}}
{{- $factors := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if or (not $number) (not (hasKey $factors $suffix)) -}}
{{- fail (printf "%q is not a Kubernetes quantity (250m, 1.5, 128Mi, 1G)" $q) -}}
{{- end -}}
{{- mulf (float64 $number) (get $factors $suffix) -}}
{{- end -}}

{{/* Fails unless each request of a container's resources is at most its limit, which the API
server requires (ValidateResourceRequirements); call with (list "<values key>" <resources>). */}}
{{- define "pe.checkResources" -}}
{{- $key := index . 0 -}}
{{- $r := index . 1 | default dict -}}
{{- $limits := $r.limits | default dict -}}
{{- range $name, $request := ($r.requests | default dict) -}}
{{- if hasKey $limits $name -}}
{{- $limit := get $limits $name -}}
{{- if gt (include "pe.quantity" $request | float64) (include "pe.quantity" $limit | float64) -}}
{{- fail (printf "%s.requests.%s (%v) is above %s.limits.%s (%v), which the API server refuses: lower the request or raise the limit" $key $name $request $key $name $limit) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The run pods' resources: `resources` over the sized defaults (a request and a limit of the
memory bound, pe.memory). A memory request given alone above the bound raises the limit with it;
a memory limit below the bound is refused, since the run may use all of it; and no request may
exceed its limit. */}}
{{- define "pe.runResources" -}}
{{- $memory := include "pe.memory" . -}}
{{- $given := deepCopy (.Values.resources | default dict) -}}
{{- $requests := $given.requests | default dict -}}
{{- $limits := $given.limits | default dict -}}
{{- $bound := include "pe.quantity" $memory | float64 -}}
{{- $limit := $memory -}}
{{- if hasKey $limits "memory" -}}
{{- if lt (include "pe.quantity" $limits.memory | float64) $bound -}}
{{- fail (printf "resources.limits.memory (%v) is below the run's memory bound, %s (32 MiB + run.memoryBudgetMiB, at least 50, + 25 MiB per run.concurrency worker: docs/contract.md, \"Memory\"): a run may use all of it and be killed. Lower run.memoryBudgetMiB or run.concurrency instead, or leave the limit out" $limits.memory $memory) -}}
{{- end -}}
{{- else if and (hasKey $requests "memory") (gt (include "pe.quantity" $requests.memory | float64) $bound) -}}
{{- $limit = $requests.memory -}}
{{- end -}}
{{- $resources := mergeOverwrite (dict "requests" (dict "cpu" "250m" "memory" $memory) "limits" (dict "memory" $limit)) $given -}}
{{- include "pe.checkResources" (list "resources" $resources) -}}
{{- toYaml $resources -}}
{{- end -}}

{{/* The run's deadline: below activeDeadlineSeconds minus the grace period, a minute spare. */}}
{{- define "pe.deadline" -}}
{{- printf "%ds" (max 60 (sub (sub (int .Values.run.activeDeadlineSeconds) (int .Values.run.terminationGracePeriodSeconds)) 60)) -}}
{{- end -}}

{{/* The pod spec shared by the recovery Job and the sweep; call with
(dict "Values" .Values "Release" .Release "Chart" .Chart "sweep" <bool>). */}}
{{- define "pe.runPod" -}}
restartPolicy: Never
serviceAccountName: {{ include "pe.serviceAccount" . }}
terminationGracePeriodSeconds: {{ .Values.run.terminationGracePeriodSeconds }}
{{- include "pe.podExtras" . }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
containers:
  - name: executor
    image: {{ include "pe.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args: ["run"{{ if .sweep }}, "--full-scan"{{ end }}{{ if .Values.run.failOnRejected }}, "--fail-on-rejected"{{ end }}]
    env:
      - name: DATABASE_URL
        valueFrom:
          secretKeyRef:
            name: {{ include "pe.secret" . }}
            key: executor-url
      - name: PACKAGE_EXECUTOR_LOG_FORMAT
        value: json
      - name: PACKAGE_EXECUTOR_DEADLINE
        value: {{ include "pe.deadline" . | quote }}
      - name: PACKAGE_EXECUTOR_MEMORY_BUDGET
        value: {{ printf "%dMiB" (int .Values.run.memoryBudgetMiB) | quote }}
      - name: PACKAGE_EXECUTOR_CONCURRENCY
        value: {{ .Values.run.concurrency | quote }}
      - name: PACKAGE_EXECUTOR_MAX_ATTEMPTS
        value: {{ .Values.run.maxAttempts | quote }}
      - name: PACKAGE_EXECUTOR_FINAL_PROBES
        value: {{ .Values.run.finalProbes | quote }}
      {{- if or .Values.metrics.pushUrl .Values.metrics.pushUrlSecret.name }}
      - name: PACKAGE_EXECUTOR_METRICS_PUSH_URL
        {{- if .Values.metrics.pushUrlSecret.name }}
        valueFrom:
          secretKeyRef:
            name: {{ .Values.metrics.pushUrlSecret.name | quote }}
            key: {{ .Values.metrics.pushUrlSecret.key | quote }}
        {{- else }}
        value: {{ .Values.metrics.pushUrl | quote }}
        {{- end }}
      - name: PACKAGE_EXECUTOR_METRICS_JOB
        value: {{ .Values.metrics.job | quote }}
      - name: PACKAGE_EXECUTOR_METRICS_INSTANCE
        value: {{ printf "%s.%s" .Release.Name .Release.Namespace | quote }}
      {{- end }}
      {{- if gt (int .Values.run.shards) 1 }}
      - name: PACKAGE_EXECUTOR_SHARD_COUNT
        value: {{ .Values.run.shards | quote }}
      {{- end }}
      - name: PACKAGE_EXECUTOR_JOB_NAME
        valueFrom:
          fieldRef:
            fieldPath: metadata.labels['batch.kubernetes.io/job-name']
      - name: PACKAGE_EXECUTOR_POD_NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
      {{- with (include "pe.timeoutEnv" . | trim) }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with (include "pe.tlsEnv" (dict "root" . "cert" .Values.database.tls.clientCert.executorSecret) | trim) }}
      {{- . | nindent 6 }}
      {{- end }}
    {{- with (include "pe.tlsMounts" (dict "root" . "cert" .Values.database.tls.clientCert.executorSecret) | trim) }}
    volumeMounts:
      {{- . | nindent 6 }}
    {{- end }}
    resources:
      {{- include "pe.runResources" . | nindent 6 }}
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    terminationMessagePolicy: FallbackToLogsOnError
{{- with (include "pe.tlsVolumes" (dict "root" . "cert" .Values.database.tls.clientCert.executorSecret) | trim) }}
volumes:
  {{- . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* What every pod of the chart carries beside its own spec: image pull secrets and the
scheduling values. */}}
{{- define "pe.podExtras" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Pod template metadata: the selector labels, the component, and the user's labels and
annotations (a mesh's sidecar opt-out, say). Call with (list $ "component"). */}}
{{- define "pe.podMeta" -}}
{{- $root := index . 0 -}}
labels:
  {{- include "pe.selector" $root | nindent 2 }}
  app.kubernetes.io/component: {{ index . 1 }}
  {{- with $root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $root.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The Job-wide deadline: every attempt (the first and backoffLimit retries) gets its full
run.activeDeadlineSeconds, plus Kubernetes' delay before each retry (at most 6 minutes). */}}
{{- define "pe.jobDeadline" -}}
{{- $retries := int .Values.run.backoffLimit -}}
{{- add (mul (add1 $retries) (int .Values.run.activeDeadlineSeconds)) (mul $retries 360) -}}
{{- end -}}

{{/* The Job spec shared by the recovery Job and the sweep. */}}
{{- define "pe.runJobSpec" -}}
activeDeadlineSeconds: {{ include "pe.jobDeadline" . }}
ttlSecondsAfterFinished: {{ .Values.run.ttlSecondsAfterFinished }}
{{- if gt (int .Values.run.shards) 1 }}
completionMode: Indexed
completions: {{ .Values.run.shards }}
parallelism: {{ .Values.run.shards }}
backoffLimitPerIndex: {{ .Values.run.backoffLimit }}
{{- else }}
backoffLimit: {{ .Values.run.backoffLimit }}
{{- end }}
podFailurePolicy:
  rules:
    # Retrying cannot help these exits; in Indexed mode only that shard stops (FailIndex).
    - action: {{ if gt (int .Values.run.shards) 1 }}FailIndex{{ else }}FailJob{{ end }}
      onExitCodes:
        containerName: executor
        operator: In
        values: [1, 2, 5, 6]
    - action: Ignore
      onPodConditions:
        - type: DisruptionTarget
          status: "True"
template:
  metadata:
    {{- include "pe.podMeta" (list . (ternary "sweep" "snapshot-recovery" (eq .sweep true))) | nindent 4 }}
  spec:
    {{- include "pe.runPod" . | nindent 4 }}
{{- end -}}


{{/* TLS environment for a container; call with (dict "root" $ "cert" <client cert Secret name>). */}}
{{/* The database timeouts that are set (database.timeouts); call with the root context. */}}
{{- define "pe.timeoutEnv" -}}
{{- $t := .Values.database.timeouts -}}
{{- range $key, $name := dict "connect" "CONNECT_TIMEOUT" "statement" "STATEMENT_TIMEOUT" "lock" "LOCK_TIMEOUT" "answerMargin" "ANSWER_MARGIN" }}
{{- with index $t $key }}
- name: PACKAGE_EXECUTOR_{{ $name }}
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "pe.tlsEnv" -}}
{{- $tls := .root.Values.database.tls -}}
{{- if $tls.sslmode }}
- name: PGSSLMODE
  value: {{ $tls.sslmode | quote }}
{{- end }}
{{- if or $tls.ca.configMap $tls.ca.secret }}
- name: PGSSLROOTCERT
  value: /etc/package-executor/tls/ca/ca.crt
{{- end }}
{{- if .cert }}
- name: PGSSLCERT
  value: /etc/package-executor/tls/client/client.crt
- name: PGSSLKEY
  value: /etc/package-executor/tls/client/client.key
{{- end }}
{{- end -}}

{{/* TLS volume mounts; same argument as pe.tlsEnv. */}}
{{- define "pe.tlsMounts" -}}
{{- $tls := .root.Values.database.tls -}}
{{- if or $tls.ca.configMap $tls.ca.secret }}
- name: tls-ca
  mountPath: /etc/package-executor/tls/ca
  readOnly: true
{{- end }}
{{- if .cert }}
- name: tls-client
  mountPath: /etc/package-executor/tls/client
  readOnly: true
{{- end }}
{{- end -}}

{{/* TLS volumes; same argument as pe.tlsEnv. */}}
{{- define "pe.tlsVolumes" -}}
{{- $tls := .root.Values.database.tls -}}
{{- if $tls.ca.configMap }}
- name: tls-ca
  configMap:
    name: {{ $tls.ca.configMap }}
    items:
      - key: {{ $tls.ca.key }}
        path: ca.crt
{{- else if $tls.ca.secret }}
- name: tls-ca
  secret:
    secretName: {{ $tls.ca.secret }}
    items:
      - key: {{ $tls.ca.key }}
        path: ca.crt
{{- end }}
{{- if .cert }}
- name: tls-client
  secret:
    secretName: {{ .cert }}
    defaultMode: 256   # 0400: read by the owner only
    items:
      - key: {{ $tls.clientCert.certKey }}
        path: client.crt
      - key: {{ $tls.clientCert.keyKey }}
        path: client.key
{{- end }}
{{- end -}}

{{/* The API server's addresses for the NetworkPolicy, as a JSON list of CIDRs: the values'
networkPolicy.apiServer.cidrs, else (networkPolicy.apiServer.lookup) the addresses of the
`kubernetes` Service's EndpointSlices read at install (/32 for IPv4, /128 for IPv6; a render
without a cluster reads none), else none: the rule then allows the API server's ports to any
address, and NOTES says so. */}}
{{- define "pe.apiServerCidrs" -}}
{{- $api := .Values.networkPolicy.apiServer -}}
{{- $cidrs := $api.cidrs -}}
{{- if and (not $cidrs) $api.lookup -}}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" -}}
{{- range ($slices.items | default list) -}}
{{- if eq (index (.metadata.labels | default dict) "kubernetes.io/service-name" | default "") "kubernetes" -}}
{{- range (.endpoints | default list) -}}
{{- range .addresses -}}
{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $cidrs | default list | toJson -}}
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

{{/* `<chart>-<version>` as a label value: `+` (SemVer build metadata) is not allowed in one. */}}
{{- define "pe.chartLabel" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* checkov's skip annotations, each with its reason: (list $ "run" | "migrate" | "trigger" |
"postgresql"). Every check the chart does not meet is here, for the object it concerns;
tests/it/chart/manifests.rs runs checkov over every render and fails on any other. */}}
{{- define "pe.checkovSkips" -}}
{{- $root := index . 0 -}}
{{- $kind := index . 1 -}}
{{- $skips := list -}}
{{- if eq $kind "postgresql" -}}
{{- $skips = list
  "CKV_K8S_11=development database: no CPU limit, a request only"
  "CKV_K8S_15=development database: the upstream image's tag, pulled if not present"
  "CKV_K8S_43=development database: the upstream image's tag (postgresql.image)"
  "CKV_K8S_35=development database: the postgres image reads POSTGRES_PASSWORD from its environment (from a Secret)"
  "CKV_K8S_40=development database: the postgres image's own user (70)"
  "CKV_K8S_22=development database: PostgreSQL writes to its image's runtime paths"
  "CKV_K8S_8=development database: a readiness probe; a restart would not help a stuck development database" -}}
{{- else -}}
{{- $skips = append $skips "CKV_K8S_11=a batch Job: CPU limits only throttle it; the request reserves its CPU" -}}
{{- $skips = append $skips "CKV_K8S_15=image.pullPolicy is the operator's choice; pin the image with image.digest" -}}
{{- if not $root.Values.image.digest -}}
{{- $skips = append $skips "CKV_K8S_43=set image.digest to pin the image by digest" -}}
{{- end -}}
{{- if ne $kind "trigger" -}}
{{- $skips = append $skips "CKV_K8S_35=the executor reads DATABASE_URL from its environment, from a Secret key that holds only this job's login" -}}
{{- end -}}
{{- if eq $kind "run" -}}
{{- $skips = append $skips "CKV_K8S_38=the run records an Event on its Job (its Role allows that alone)" -}}
{{- else if eq $kind "trigger" -}}
{{- $skips = append $skips "CKV_K8S_38=trigger reads the recovery template and creates the Job (its Role allows that alone)" -}}
{{- end -}}
{{- end -}}
{{- if not $root.Values.networkPolicy.enabled -}}
{{- $skips = append $skips "CKV2_K8S_6=networkPolicy.enabled is off: the cluster's own policies govern these pods" -}}
{{- end -}}
{{- range $i, $s := $skips }}
checkov.io/skip{{ add1 $i }}: {{ $s | quote }}
{{- end -}}
{{- end -}}
