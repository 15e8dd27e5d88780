{{/* TLS to PostgreSQL: the environment, mounts and volumes of a container's CA bundle and client
certificate, and the development database's password. Every helper is called one way: with the
chart's root context ($ or .), or, when it needs more, with (dict "root" $ "<argument>" …), its
arguments named. */}}

{{/* The development database's password as it must stand in a URL's user part: percent-encoded
(urlquery writes a space as "+", which a user part reads as a plus). */}}
{{- define "pe.urlPassword" -}}
{{- include "pe.postgresqlPassword" . | urlquery | replace "+" "%20" -}}
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

{{/* The development database's password: postgresql.password when given; else the one the
installed release's Secret holds (lookup), so an upgrade keeps it; else a new random one, kept in
.Values for the rest of this render, so every object of it agrees. A render without a cluster
(helm template, Argo CD) reads no Secret and makes a new one each time: set postgresql.password
there. */}}
{{- define "pe.postgresqlPassword" -}}
{{- if not .Values.postgresql.password -}}
{{- $installed := lookup "v1" "Secret" .Release.Namespace (include "pe.postgresqlName" .) -}}
{{- $kept := "" -}}
{{- with $installed -}}{{- with .data -}}{{- with .password -}}{{- $kept = b64dec . -}}{{- end -}}{{- end -}}{{- end -}}
{{- $_ := set .Values.postgresql "password" (default (randAlphaNum 32) $kept) -}}
{{- end -}}
{{- .Values.postgresql.password -}}
{{- end -}}
