{{/* The pods: the image, the run pods' resources and deadlines, the recovery Job's and the sweep's
shared Job and pod spec, and what every pod carries. Every helper is called one way: with the
chart's root context ($ or .), or, when it needs more, with (dict "root" $ "<argument>" …), its
arguments named. */}}

{{/* The image: `repository:tag`, pinned by `@digest` when image.digest is given (the digest
alone decides what runs; the tag stays for people reading the pod). */}}
{{- define "pe.image" -}}
{{- include "pe.registry" (dict "root" . "image" (printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag))) -}}
{{- with .Values.image.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* An image behind global.imageRegistry when it is set (a parent chart's, or a mirror):
(dict "root" $ "image" "repository:tag"). */}}
{{- define "pe.registry" -}}
{{- with (.root.Values.global | default dict).imageRegistry -}}
{{- printf "%s/%s" (trimSuffix "/" .) $.image -}}
{{- else -}}
{{- .image -}}
{{- end -}}
{{- end -}}

{{/* The environment that gives a container ROLE's database login: (dict "root" $ "role"
"executor" | "migrate"). From database.<role>Login when it names a Secret: its key holding a
whole URL (urlKey), or the connection's parts as libpq reads them (PGHOST, PGPORT, PGDATABASE,
PGUSER from values or the Secret's keys, PGPASSWORD from its key alone) beside a DATABASE_URL
of `postgres://`; else the chart's Secret's <role>-url. A password is only ever a reference
to a Secret's key, never a value in the pod spec or an argument. */}}
{{- define "pe.loginEnv" -}}
{{- $login := index .root.Values.database (printf "%sLogin" .role) -}}
{{- if not $login.secret }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "pe.secret" .root }}
      key: {{ .role }}-url
{{- else if $login.urlKey }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $login.secret | quote }}
      key: {{ $login.urlKey | quote }}
{{- else }}
- name: DATABASE_URL
  value: "postgres://"
{{- range $part, $var := dict "host" "PGHOST" "port" "PGPORT" "dbname" "PGDATABASE" "user" "PGUSER" }}
{{- $value := index $login $part | toString }}
{{- $key := index $login.keys $part }}
{{- if $value }}
- name: {{ $var }}
  value: {{ $value | quote }}
{{- else if $key }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $login.secret | quote }}
      key: {{ $key | quote }}
{{- end }}
{{- end }}
{{- with $login.keys.password }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $login.secret | quote }}
      key: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The user's extraEnv for an executor container; a name the chart sets itself is refused. */}}
{{- define "pe.extraEnv" -}}
{{- range .Values.extraEnv }}
{{- if or (has .name (list "DATABASE_URL" "PGSSLMODE" "PGSSLROOTCERT" "PGSSLCERT" "PGSSLKEY" "PGHOST" "PGPORT" "PGDATABASE" "PGUSER" "PGPASSWORD")) (hasPrefix "PACKAGE_EXECUTOR_" .name) }}
{{- fail (printf "extraEnv: %s is set by the chart (from its own values: database.*, run.*, metrics.*); set the value it comes from instead" .name) }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{- toYaml . }}
{{- end }}
{{- end -}}

{{/* Memory limit: the bound docs/contract.md states ("Memory"), at the chart's flags:
32 MiB for the process, the revision budget (at least the largest single read, 50 MiB), and
35 MiB per worker for the snapshot it builds and its first project's observation.
coordinator::memory_bound is the same formula;
tests/it/chart/manifests.rs holds the two equal. */}}
{{- define "pe.memory" -}}
{{- $b := int .Values.run.memoryBudgetMiB -}}
{{- printf "%dMi" (add 32 (max $b 50) (mul (int .Values.run.concurrency) 35)) -}}
{{- end -}}

{{/* A quantity (the schema's pattern: a decimal number and an optional suffix) in its base unit
(bytes, cores), as a float, to compare two of them: (dict "root" $ "quantity" "128Mi"). */}}
{{- define "pe.quantity" -}}
{{- $q := toString .quantity -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $suffix := trimPrefix $number $q -}}
{{- $factors := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if or (not $number) (not (hasKey $factors $suffix)) -}}
{{- fail (printf "%q is not a Kubernetes quantity (250m, 1.5, 128Mi, 1G)" $q) -}}
{{- end -}}
{{- mulf (float64 $number) (get $factors $suffix) -}}
{{- end -}}

{{/* Fails unless each request of a container's resources is at most its limit, which the API
server requires (ValidateResourceRequirements): (dict "root" $ "key" "<values key>" "resources"
<resources>). */}}
{{- define "pe.checkResources" -}}
{{- $root := .root -}}
{{- $key := .key -}}
{{- $r := .resources | default dict -}}
{{- $limits := $r.limits | default dict -}}
{{- range $name, $request := ($r.requests | default dict) -}}
{{- if hasKey $limits $name -}}
{{- $limit := get $limits $name -}}
{{- if gt (include "pe.quantity" (dict "root" $root "quantity" $request) | float64) (include "pe.quantity" (dict "root" $root "quantity" $limit) | float64) -}}
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
{{- $bound := include "pe.quantity" (dict "root" . "quantity" $memory) | float64 -}}
{{- $limit := $memory -}}
{{- if hasKey $limits "memory" -}}
{{- if lt (include "pe.quantity" (dict "root" . "quantity" $limits.memory) | float64) $bound -}}
{{- fail (printf "resources.limits.memory (%v) is below the run's memory bound, %s (32 MiB + run.memoryBudgetMiB, at least 50, + 35 MiB per run.concurrency worker: docs/contract.md, \"Memory\"): a run may use all of it and be killed. Lower run.memoryBudgetMiB or run.concurrency instead, or leave the limit out" $limits.memory $memory) -}}
{{- end -}}
{{- else if and (hasKey $requests "memory") (gt (include "pe.quantity" (dict "root" . "quantity" $requests.memory) | float64) $bound) -}}
{{- $limit = $requests.memory -}}
{{- end -}}
{{- $resources := mergeOverwrite (dict "requests" (dict "cpu" "250m" "memory" $memory) "limits" (dict "memory" $limit)) $given -}}
{{- include "pe.checkResources" (dict "root" . "key" "resources" "resources" $resources) -}}
{{- toYaml $resources -}}
{{- end -}}

{{/* The run's deadline: below activeDeadlineSeconds minus the grace period, a minute spare. */}}
{{- define "pe.deadline" -}}
{{- printf "%ds" (max 60 (sub (sub (int .Values.run.activeDeadlineSeconds) (int .Values.run.terminationGracePeriodSeconds)) 60)) -}}
{{- end -}}

{{/* The Job-wide deadline: every attempt (the first and backoffLimit retries) gets its full
run.activeDeadlineSeconds, plus the Job controller's delay before each retry: 10 s doubled at
each failure, at most 10 minutes (DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff in
kubernetes/pkg/controller/job/job_controller.go; 10 + 20 + 40 s for 3 retries). */}}
{{- define "pe.jobDeadline" -}}
{{- $retries := int .Values.run.backoffLimit -}}
{{- $delays := 0 -}}
{{- $delay := 10 -}}
{{- range until $retries -}}
{{- $delays = add $delays $delay -}}
{{- $delay = min 600 (mul $delay 2) -}}
{{- end -}}
{{- add (mul (add1 $retries) (int .Values.run.activeDeadlineSeconds)) $delays -}}
{{- end -}}

{{/* The Job spec shared by the recovery Job and the sweep: (dict "root" $ "sweep" <bool>). */}}
{{- define "pe.runJobSpec" -}}
{{- $sweep := .sweep -}}
{{- with .root -}}
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
    {{- include "pe.podMeta" (dict "root" . "component" (ternary "sweep" "snapshot-recovery" $sweep)) | nindent 4 }}
  spec:
    {{- include "pe.runPod" (dict "root" . "sweep" $sweep) | nindent 4 }}
{{- end -}}
{{- end -}}

{{/* The pod spec shared by the recovery Job and the sweep: (dict "root" $ "sweep" <bool>). */}}
{{- define "pe.runPod" -}}
{{- $sweep := .sweep -}}
{{- with .root -}}
restartPolicy: Never
serviceAccountName: {{ include "pe.serviceAccount" . }}
terminationGracePeriodSeconds: {{ .Values.run.terminationGracePeriodSeconds }}
{{- include "pe.podExtras" (dict "root" . "workload" "run") }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- include "pe.initContainers" . }}
containers:
  - name: executor
    image: {{ include "pe.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args: ["run"{{ if $sweep }}, "--full-scan"{{ end }}{{ if .Values.run.failOnRejected }}, "--fail-on-rejected"{{ end }}]
    env:
      {{- include "pe.loginEnv" (dict "root" . "role" "executor") | trim | nindent 6 }}
      - name: PACKAGE_EXECUTOR_LOG_FORMAT
        value: json
      - name: PACKAGE_EXECUTOR_DEADLINE
        value: {{ include "pe.deadline" . | quote }}
      - name: PACKAGE_EXECUTOR_MEMORY_BUDGET
        value: {{ printf "%dMiB" (int .Values.run.memoryBudgetMiB) | quote }}
      - name: PACKAGE_EXECUTOR_CONCURRENCY
        value: {{ .Values.run.concurrency | quote }}
      - name: PACKAGE_EXECUTOR_BATCH_SIZE
        value: {{ .Values.run.batchSize | quote }}
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
      {{- with (include "pe.extraEnv" . | trim) }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with (include "pe.tlsEnv" (dict "root" . "cert" .Values.database.tls.clientCert.executorSecret) | trim) }}
      {{- . | nindent 6 }}
      {{- end }}
    {{- with (include "pe.envFrom" . | trim) }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with (include "pe.volumeMounts" (dict "root" . "tls" true "cert" .Values.database.tls.clientCert.executorSecret) | trim) }}
    {{- . | nindent 4 }}
    {{- end }}
    resources:
      {{- include "pe.runResources" . | nindent 6 }}
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    terminationMessagePolicy: FallbackToLogsOnError
{{- include "pe.volumes" (dict "root" . "tls" true "cert" .Values.database.tls.clientCert.executorSecret) }}
{{- end -}}
{{- end -}}

{{/* An executor pod's template metadata (the recovery Job, the sweep, the hooks): the
selector labels and the component, and the user's labels and annotations (a mesh's sidecar
opt-out, say): (dict "root" $ "component" "…"). */}}
{{- define "pe.podMeta" -}}
{{- $labels := include "pe.selector" .root | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/component" .component -}}
{{- include "pe.podMetaWith" (dict "root" .root "labels" $labels "annotations" dict) -}}
{{- end -}}

{{/* Pod template metadata: the chart's labels and annotations, and the user's podLabels and
podAnnotations beside them; a user key that is one of the chart's is refused (it would repeat a
YAML key, and the chart selects its pods by these labels): (dict "root" $ "labels" <dict>
"annotations" <dict>). */}}
{{- define "pe.podMetaWith" -}}
{{- $root := .root -}}
{{- $labels := .labels -}}
{{- $annotations := .annotations -}}
{{- $userLabels := $root.Values.podLabels | default dict -}}
{{- $userAnnotations := $root.Values.podAnnotations | default dict -}}
{{- range $key := keys $userLabels | sortAlpha -}}
{{- if hasKey $labels $key -}}
{{- fail (printf "podLabels.%s: the chart sets this label on its pods (%s: %v) and selects them by it; give your label another key" $key $key (get $labels $key)) -}}
{{- end -}}
{{- end -}}
{{- range $key := keys $userAnnotations | sortAlpha -}}
{{- if hasKey $annotations $key -}}
{{- fail (printf "podAnnotations.%s: the chart sets this annotation on its pods; give yours another key" $key) -}}
{{- end -}}
{{- end -}}
labels:
  {{- toYaml (merge (dict) $labels $userLabels) | nindent 2 }}
{{- with (merge (dict) $annotations $userAnnotations) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* What every pod of the chart carries beside its own spec: image pull secrets (the chart's
and global.imagePullSecrets) and the scheduling values, a workload's own (run.*, migration.*,
recovery.hook*, postgresql.*: nodeSelector, tolerations, affinity, topologySpreadConstraints,
priorityClassName) over the chart-wide ones:
(dict "root" $ "workload" "run" | "migration" | "hook" | "postgresql"). */}}
{{- define "pe.podExtras" -}}
{{- $v := .root.Values -}}
{{- $own := dict -}}
{{- if eq .workload "hook" -}}
{{- $own = dict "nodeSelector" $v.recovery.hookNodeSelector "tolerations" $v.recovery.hookTolerations "affinity" $v.recovery.hookAffinity "topologySpreadConstraints" $v.recovery.hookTopologySpreadConstraints "priorityClassName" $v.recovery.hookPriorityClassName -}}
{{- else -}}
{{- $own = index $v .workload -}}
{{- end -}}
{{- $pullSecrets := $v.imagePullSecrets | default list -}}
{{- range ($v.global | default dict).imagePullSecrets | default list -}}
{{- $pullSecrets = append $pullSecrets (ternary (dict "name" .) . (kindIs "string" .)) -}}
{{- end -}}
{{- with $pullSecrets | uniq }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $own.nodeSelector | default $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $own.tolerations | default $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $own.affinity | default $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $own.topologySpreadConstraints | default $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $own.priorityClassName | default $v.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- end -}}

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

{{/* The pod of a Job that only talks to the database (the migration, the rollback check): no
Kubernetes API token, the migration's resources and scheduling, one container NAME running ARGS
with ROLE's database login (pe.loginEnv) and the client certificate CERT: (dict "root" $ "name"
"…" "args" (list …) "role" "migrate" | "executor" "cert" <Secret name>). */}}
{{- define "pe.databasePod" -}}
{{- $cert := .cert -}}
{{- $name := .name -}}
{{- $args := .args -}}
{{- $role := .role -}}
{{- with .root -}}
restartPolicy: Never
serviceAccountName: {{ include "pe.serviceAccount" . }}
# It calls no Kubernetes API: no token in its pod.
automountServiceAccountToken: false
{{- include "pe.podExtras" (dict "root" . "workload" "migration") }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- include "pe.initContainers" . }}
containers:
  - name: {{ $name }}
    image: {{ include "pe.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args: {{ toJson $args }}
    env:
      {{- include "pe.loginEnv" (dict "root" . "role" $role) | trim | nindent 6 }}
      - name: PACKAGE_EXECUTOR_LOG_FORMAT
        value: json
      {{- with (include "pe.timeoutEnv" . | trim) }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with (include "pe.extraEnv" . | trim) }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with (include "pe.tlsEnv" (dict "root" . "cert" $cert) | trim) }}
      {{- . | nindent 6 }}
      {{- end }}
    {{- with (include "pe.envFrom" . | trim) }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with (include "pe.volumeMounts" (dict "root" . "tls" true "cert" $cert) | trim) }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- include "pe.checkResources" (dict "root" . "key" "migration.resources" "resources" .Values.migration.resources) }}
    resources:
      {{- toYaml .Values.migration.resources | nindent 6 }}
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    terminationMessagePolicy: FallbackToLogsOnError
{{- include "pe.volumes" (dict "root" . "tls" true "cert" $cert) }}
{{- end -}}
{{- end -}}

{{/* An executor container's envFrom (the user's), if any; call with the root context. */}}
{{- define "pe.envFrom" -}}
{{- with .Values.envFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An executor container's volume mounts: the TLS material's when TLS (a pod that talks to the
database; CERT as pe.tlsEnv takes it) and the user's extraVolumeMounts: (dict "root" $ "tls"
<bool> "cert" <Secret name>). */}}
{{- define "pe.volumeMounts" -}}
{{- $mounts := list -}}
{{- if .tls }}{{- $mounts = include "pe.tlsMounts" . | fromYamlArray | default list -}}{{- end -}}
{{- $mounts = concat $mounts (.root.Values.extraVolumeMounts | default list) -}}
{{- with $mounts }}
volumeMounts:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An executor pod's volumes: the TLS material's when TLS and the user's extraVolumes, whose
names may not be the chart's (tls-ca, tls-client): as pe.volumeMounts. */}}
{{- define "pe.volumes" -}}
{{- $volumes := list -}}
{{- if .tls }}{{- $volumes = include "pe.tlsVolumes" . | fromYamlArray | default list -}}{{- end -}}
{{- range .root.Values.extraVolumes | default list }}
{{- if has .name (list "tls-ca" "tls-client") }}
{{- fail (printf "extraVolumes: %s is the name of the chart's own TLS volume; give yours another name" .name) }}
{{- end }}
{{- end }}
{{- $volumes = concat $volumes (.root.Values.extraVolumes | default list) -}}
{{- with $volumes }}
volumes:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An executor pod's init containers (the user's), if any; call with the root context. */}}
{{- define "pe.initContainers" -}}
{{- with .Values.initContainers }}
initContainers:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
