{{/* Policy: the NetworkPolicy's API server addresses, checkov's explained skips, and Argo CD's
order. Every helper is called one way: with the chart's root context ($ or .), or, when it needs
more, with (dict "root" $ "<argument>" …), its arguments named. */}}

{{/* The API server's addresses for the NetworkPolicy, as a JSON list of CIDRs: the values'
networkPolicy.apiServer.cidrs, else (networkPolicy.apiServer.lookup) the addresses of the
`kubernetes` Service's EndpointSlices read at install and at each upgrade (/32 for IPv4, /128
for IPv6; a render without a cluster reads none), else none: the rule then allows the API
server's ports to any address, and NOTES says so. A policy names the API server by its own
addresses, never by the `kubernetes` Service's ClusterIP: kube-proxy rewrites that address
before most policy implementations (Calico, Cilium, kube-router) look, so a rule for it never
matches. With lookup on, a ClusterIP among the cidrs is refused, naming the addresses to give. */}}
{{- define "pe.apiServerCidrs" -}}
{{- $api := .Values.networkPolicy.apiServer -}}
{{- $cidrs := $api.cidrs | default list -}}
{{- if $api.lookup -}}
{{- $endpoints := list -}}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" -}}
{{- range ($slices.items | default list) -}}
{{- if eq (index (.metadata.labels | default dict) "kubernetes.io/service-name" | default "") "kubernetes" -}}
{{- range (.endpoints | default list) -}}
{{- range .addresses -}}
{{- $endpoints = append $endpoints (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $service := lookup "v1" "Service" "default" "kubernetes" -}}
{{- range (($service.spec | default dict).clusterIPs | default list) -}}
{{- $clusterIP := printf "%s/%s" . (ternary "128" "32" (contains ":" .)) -}}
{{- if has $clusterIP $cidrs -}}
{{- fail (printf "networkPolicy.apiServer.cidrs holds %s, the `kubernetes` Service's ClusterIP: most NetworkPolicy implementations see the API server's own address after kube-proxy rewrote it, so this rule would never match and every call to the API server would be dropped. Give the API server's addresses instead (%s, from `kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes`), or leave cidrs empty with lookup=true" $clusterIP (join ", " $endpoints | default "none found")) -}}
{{- end -}}
{{- end -}}
{{- if not $cidrs -}}
{{- $cidrs = $endpoints -}}
{{- end -}}
{{- end -}}
{{- $cidrs | toJson -}}
{{- end -}}

{{/* checkov's skip annotations, each with its reason: (dict "root" $ "kind" "run" | "migrate" |
"trigger" | "test" | "postgresql"). Every check the chart does not meet is here, for the object it concerns;
tests/it/chart/manifests.rs runs checkov over every render and fails on any other. */}}
{{- define "pe.checkovSkips" -}}
{{- $root := .root -}}
{{- $kind := .kind -}}
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
{{- else if contains "secretRef" (toJson ($root.Values.envFrom | default list)) -}}
{{- $skips = append $skips "CKV_K8S_35=envFrom: a Secret the platform's overlay passes as variables, as it chose" -}}
{{- end -}}
{{- if eq $kind "run" -}}
{{- $skips = append $skips "CKV_K8S_38=the run records an Event on its Job (its Role allows that alone)" -}}
{{- else if eq $kind "trigger" -}}
{{- $skips = append $skips "CKV_K8S_38=trigger reads the recovery template and creates the Job (its Role allows that alone)" -}}
{{- else if eq $kind "test" -}}
{{- $skips = append $skips "CKV_K8S_8=helm test's one-shot pod: it ends with its answer, nothing to probe" -}}
{{- $skips = append $skips "CKV_K8S_9=helm test's one-shot pod: it ends with its answer, nothing to probe" -}}
{{- end -}}
{{- end -}}
{{- if not $root.Values.networkPolicy.enabled -}}
{{- $skips = append $skips "CKV2_K8S_6=networkPolicy.enabled is off: the cluster's own policies govern these pods" -}}
{{- end -}}
{{- range $i, $s := $skips }}
checkov.io/skip{{ add1 $i }}: {{ $s | quote }}
{{- end -}}
{{- end -}}

{{/* Argo CD's order (it renders with `helm template` and runs hooks its own way): Helm's
post-install and post-upgrade hooks would be PostSync hooks, which Argo CD starts only once
every resource of the sync is Healthy, and a CronJob whose last Job failed is Degraded
(resource_customizations/batch/CronJob/health.lua), which fails the sync instead: a failed
sweep would then hold back the migration and every publication's run. So both hooks are
Sync-phase hooks (Argo CD reads its own annotation and ignores Helm's: gitops-engine
pkg/sync/hook), in waves that put every CronJob after the hooks that need it not: the migration
(1), the recovery template the trigger reads (2), the trigger (3), the sweep (4). Helm ignores
these annotations. (dict "root" $ "step" "migrate" | "template" | "trigger" | "sweep") */}}
{{- define "pe.argoWave" -}}
{{- $wave := get (dict "migrate" "1" "template" "2" "trigger" "3" "sweep" "4") .step -}}
{{- if has .step (list "migrate" "trigger") }}
argocd.argoproj.io/hook: Sync
{{- end }}
argocd.argoproj.io/sync-wave: {{ $wave | quote }}
{{- end -}}
