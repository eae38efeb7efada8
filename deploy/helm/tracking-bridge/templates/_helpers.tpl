{{/* The chart's name, or nameOverride. */}}
{{- define "tracking-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release's, with the chart's name added unless it is in it already. */}}
{{- define "tracking-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tracking-bridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels of every object. */}}
{{- define "tracking-bridge.labels" -}}
helm.sh/chart: {{ include "tracking-bridge.chart" . }}
{{ include "tracking-bridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels that select the bridge's pods. */}}
{{- define "tracking-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tracking-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: bridge
{{- end }}

{{- define "tracking-bridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tracking-bridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tracking-bridge.image" -}}
{{- $ref := .Values.image.repository }}
{{- with .Values.image.tag | default .Chart.AppVersion }}{{ $ref = printf "%s:%s" $ref . }}{{ end }}
{{- with .Values.image.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end }}
{{- $ref }}
{{- end }}

{{/*
The files the bridge reads from mounted Secrets (and ConfigMaps, for CA certificates), as JSON: a list of
volumes, each {name, secret or configMap, files: [{env, key}]}, mounted read-only at /run/secrets/<name>,
each file named to the bridge by its *_FILE variable. At most one NATS authentication method.
*/}}
{{- define "tracking-bridge.fileVolumes" -}}
{{- $v := list }}
{{- with .Values.upstream.password }}
{{- $v = append $v (dict "name" "upstream" "secret" (required "upstream.password.existingSecret: the upstream account's password comes from an existing Secret" .existingSecret) "files" (list (dict "env" "BRIDGE_PASSWORD_FILE" "key" .key))) }}
{{- end }}
{{- $v = concat $v (include "tracking-bridge.caVolume" (list "upstream-ca" "BRIDGE_UPSTREAM_CA_FILE" .Values.upstream.ca "upstream.ca") | fromJsonArray) }}
{{- $auth := list }}
{{- with .Values.nats.credentials }}{{ if .existingSecret }}
{{- $auth = append $auth "nats.credentials" }}
{{- $v = append $v (dict "name" "nats" "secret" .existingSecret "files" (list (dict "env" "BRIDGE_NATS_CREDS_FILE" "key" .key))) }}
{{- end }}{{ end }}
{{- with .Values.nats.nkey }}{{ if .existingSecret }}
{{- $auth = append $auth "nats.nkey" }}
{{- $v = append $v (dict "name" "nats-nkey" "secret" .existingSecret "files" (list (dict "env" "BRIDGE_NATS_NKEY_SEED_FILE" "key" .key))) }}
{{- end }}{{ end }}
{{- with .Values.nats.user }}{{ if or .name .existingSecret }}
{{- $auth = append $auth "nats.user" }}
{{- if not (and .name .existingSecret) }}
{{- fail "nats.user: set both the name and the existingSecret of its password" }}
{{- end }}
{{- $v = append $v (dict "name" "nats-password" "secret" .existingSecret "files" (list (dict "env" "BRIDGE_NATS_PASSWORD_FILE" "key" .key))) }}
{{- end }}{{ end }}
{{- with .Values.nats.token }}{{ if .existingSecret }}
{{- $auth = append $auth "nats.token" }}
{{- $v = append $v (dict "name" "nats-token" "secret" .existingSecret "files" (list (dict "env" "BRIDGE_NATS_TOKEN_FILE" "key" .key))) }}
{{- end }}{{ end }}
{{- if gt (len $auth) 1 }}
{{- fail (printf "NATS authentication: %s are set; use at most one (clear the others' existingSecret)" (join ", " $auth)) }}
{{- end }}
{{- $v = concat $v (include "tracking-bridge.caVolume" (list "nats-ca" "BRIDGE_NATS_CA_FILE" .Values.nats.tls.ca "nats.tls.ca") | fromJsonArray) }}
{{- with .Values.nats.tls.client }}{{ if .existingSecret }}
{{- $v = append $v (dict "name" "nats-tls" "secret" .existingSecret "files" (list (dict "env" "BRIDGE_NATS_CERT_FILE" "key" .certKey) (dict "env" "BRIDGE_NATS_KEY_FILE" "key" .keyKey))) }}
{{- end }}{{ end }}
{{- toJson $v }}
{{- end }}

{{/* A CA bundle's volume from (list name env values path): none, or one from a Secret or a ConfigMap. */}}
{{- define "tracking-bridge.caVolume" -}}
{{- $name := index . 0 }}{{ $env := index . 1 }}{{ $ca := index . 2 }}{{ $path := index . 3 }}
{{- $files := list (dict "env" $env "key" $ca.key) }}
{{- if and $ca.existingSecret $ca.existingConfigMap }}
{{- fail (printf "%s: set existingSecret or existingConfigMap, not both" $path) }}
{{- else if $ca.existingSecret }}
{{- list (dict "name" $name "secret" $ca.existingSecret "files" $files) | toJson }}
{{- else if $ca.existingConfigMap }}
{{- list (dict "name" $name "configMap" $ca.existingConfigMap "files" $files) | toJson }}
{{- else }}
{{- list | toJson }}
{{- end }}
{{- end }}

{{/* A value of config as the environment gives it: a string (numbers as integers, as YAML wrote them). */}}
{{- define "tracking-bridge.envValue" -}}
{{- if kindIs "float64" . }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* A Go duration (what BRIDGE_* durations accept: 90s, 1m30s, 1.5h, 500ms) in seconds, as a float. */}}
{{- define "tracking-bridge.seconds" -}}
{{- $unit := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 1e-3 "us" 1e-6 "µs" 1e-6 "μs" 1e-6 "ns" 1e-9 }}
{{- $total := 0.0 }}
{{- range regexFindAll `([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)` (toString .) -1 }}
{{- $n := regexFind `^[0-9.]+` . }}
{{- $total = addf $total (mulf (float64 $n) (get $unit (trimPrefix $n .))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
The pods' terminationGracePeriodSeconds, refused unless it is more than BRIDGE_SHUTDOWN_TIMEOUT (the
bridge's default 30s when unset) plus the 2 s the bridge allows itself past it (shutdownGrace in
cmd/bridge/main.go): a shorter grace kills a leader mid-shutdown.
*/}}
{{- define "tracking-bridge.terminationGracePeriodSeconds" -}}
{{- $timeout := .Values.config.BRIDGE_SHUTDOWN_TIMEOUT | default "30s" }}
{{- $least := addf (include "tracking-bridge.seconds" $timeout | float64) 2 }}
{{- $grace := .Values.terminationGracePeriodSeconds }}
{{- if le (float64 $grace) $least }}
{{- fail (printf "terminationGracePeriodSeconds %v is not more than config.BRIDGE_SHUTDOWN_TIMEOUT (%v) plus the 2 s the bridge allows itself past it: set it to at least %v" $grace $timeout (add1 (floor $least))) }}
{{- end }}
{{- $grace }}
{{- end }}

{{- /* The port a URL connects to: the one it names, else its scheme's from the dict given ((list URL
defaults)); the network policy opens it. */ -}}
{{- define "tracking-bridge.urlPort" -}}
{{- $u := urlParse (index . 0) -}}
{{- $port := regexFind ":[0-9]+$" $u.host | trimPrefix ":" -}}
{{- if not $port -}}
{{- $port = get (index . 1) (lower $u.scheme) -}}
{{- end -}}
{{- if not $port -}}
{{- fail (printf "networkPolicy: cannot tell the port of %q (scheme %q)" (index . 0) $u.scheme) -}}
{{- end -}}
{{- $port -}}
{{- end -}}
