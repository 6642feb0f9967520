{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "loghaul.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's resources. */}}
{{- define "loghaul.fullname" -}}
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

{{- define "loghaul.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every resource carries. */}}
{{- define "loghaul.labels" -}}
helm.sh/chart: {{ include "loghaul.chart" . }}
{{ include "loghaul.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: loghaul
{{- end }}

{{/* Labels that select the server pods (immutable in the Deployment selector). */}}
{{- define "loghaul.selectorLabels" -}}
app.kubernetes.io/name: {{ include "loghaul.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "loghaul.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "loghaul.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "loghaul.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The SQLite URL used when neither database.url nor database.existingSecret is set. */}}
{{- define "loghaul.sqliteDefaultUrl" -}}
{{- printf "sqlite://%s/loghaul.db" (trimSuffix "/" .Values.persistence.mountPath) }}
{{- end }}

{{/* The database URL the chart puts in its Secret ("" when database.existingSecret holds it). */}}
{{- define "loghaul.databaseUrl" -}}
{{- if .Values.database.url }}
{{- .Values.database.url }}
{{- else if not .Values.database.existingSecret }}
{{- include "loghaul.sqliteDefaultUrl" . }}
{{- end }}
{{- end }}

{{/* "sqlite" or "postgres". An existingSecret is taken to hold a PostgreSQL URL. */}}
{{- define "loghaul.dbMode" -}}
{{- $url := include "loghaul.databaseUrl" . }}
{{- if and (not .Values.database.existingSecret) (hasPrefix "sqlite:" $url) }}sqlite{{ else }}postgres{{ end }}
{{- end }}

{{/* "true" when the chart creates the Secret with the database URL, else "". */}}
{{- define "loghaul.createSecret" -}}
{{- if not .Values.database.existingSecret }}true{{ end }}
{{- end }}

{{- define "loghaul.databaseSecretName" -}}
{{- default (include "loghaul.fullname" .) .Values.database.existingSecret }}
{{- end }}

{{- define "loghaul.databaseSecretKey" -}}
{{- if .Values.database.existingSecret }}{{ .Values.database.existingSecretKey }}{{ else }}database-url{{ end }}
{{- end }}

{{/* "true" when the chart generates the API key (neither apiKeys nor apiKeysExistingSecret is set). */}}
{{- define "loghaul.generatesApiKey" -}}
{{- if not (or .Values.apiKeys .Values.apiKeysExistingSecret) }}true{{ end }}
{{- end }}

{{/* The Secret whose keys file the pods mount: apiKeysExistingSecret, or the chart's own. */}}
{{- define "loghaul.apiKeysSecretName" -}}
{{- default (printf "%s-api-keys" (include "loghaul.fullname" .)) .Values.apiKeysExistingSecret }}
{{- end }}

{{- define "loghaul.apiKeysSecretKey" -}}
{{- if .Values.apiKeysExistingSecret }}{{ .Values.apiKeysExistingSecretKey }}{{ else }}keys.toml{{ end }}
{{- end }}

{{/* Where the keys file is mounted; the directory, not the file, so Secret updates reach it. */}}
{{- define "loghaul.apiKeysDir" -}}/etc/loghaul-keys{{- end }}

{{/* A keys file (`loghaul serve --api-keys-file`) mapping each key of the dict `keys` to its tenant. */}}
{{- define "loghaul.apiKeysToml" -}}
# API key -> tenant, rendered by the Helm chart. Pods reload this file when it changes.
[keys]
{{- range $key := keys . | sortAlpha }}
{{- $tenant := toString (get $ $key) }}
{{- if not $tenant }}
{{- fail (printf "loghaul: apiKeys entry %q has an empty tenant" $key) }}
{{- end }}
{{ toJson $key }} = {{ toJson $tenant }}
{{- end }}
{{- end }}

{{/* terminationGracePeriodSeconds: the service's shutdown-grace plus preStop sleep plus a margin for the final flush. */}}
{{- define "loghaul.terminationGracePeriodSeconds" -}}
{{- add (int .Values.config.shutdownGraceSeconds) (int .Values.preStopSleepSeconds) (int .Values.shutdownMarginSeconds) }}
{{- end }}

{{/* PromQL label matchers selecting this release's series, as Prometheus Operator labels them. */}}
{{- define "loghaul.metricSelector" -}}
{{- if .Values.prometheusRule.metricSelector }}
{{- .Values.prometheusRule.metricSelector }}
{{- else }}
{{- printf "job=%q, namespace=%q" (include "loghaul.fullname" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/* "true" when the HTTP ingest listener (OTLP/HTTP, Loki push) is on, else "". */}}
{{- define "loghaul.httpEnabled" -}}
{{- if .Values.config.httpListenEnabled }}true{{ end }}
{{- end }}

{{/* config.httpCorsOrigins as the comma-separated string of --http-cors-origins (a list is joined, blanks trimmed); "" = CORS off. */}}
{{- define "loghaul.httpCorsOrigins" -}}
{{- $origins := .Values.config.httpCorsOrigins }}
{{- if not (kindIs "slice" $origins) }}
{{- $origins = splitList "," (toString (default "" $origins)) }}
{{- end }}
{{- $clean := list }}
{{- range $origins }}
{{- with trim (toString .) }}
{{- $clean = append $clean . }}
{{- end }}
{{- end }}
{{- join "," $clean }}
{{- end }}

{{/* The service's TOML config. Only keys `loghaul serve` knows: it refuses to start on any other. */}}
{{- define "loghaul.configToml" -}}
{{- $c := .Values.config -}}
# loghaul serve --config file, rendered by the Helm chart. Keys are the flag names.
# The database URL comes from the environment and the API keys from a mounted file (Secrets), not from here.
listen = {{ printf "%s:%d" $c.bindAddress (int .Values.containerPorts.grpc) | toJson }}
metrics-listen = {{ printf "%s:%d" $c.bindAddress (int .Values.containerPorts.metrics) | toJson }}
{{- if include "loghaul.httpEnabled" . }}
http-listen = {{ printf "%s:%d" $c.bindAddress (int .Values.containerPorts.http) | toJson }}
{{- with include "loghaul.httpCorsOrigins" . }}
http-cors-origins = {{ toJson . }}
{{- end }}
{{- else }}
http-listen = "off"
{{- end }}
shards = {{ int64 $c.shards }}
batch-max-rows = {{ int64 $c.batchMaxRows }}
batch-max-bytes = {{ toString $c.batchMaxBytes | toJson }}
batch-linger = {{ toString $c.batchLinger | toJson }}
queue-capacity = {{ int64 $c.queueCapacity }}
enqueue-timeout = {{ toString $c.enqueueTimeout | toJson }}
max-buffered-bytes = {{ toString $c.maxBufferedBytes | toJson }}
tenant-buffer-share = {{ int64 $c.tenantBufferShare }}
min-body-rate = {{ toString $c.minBodyRate | toJson }}
min-body-rate-grace = {{ toString $c.minBodyRateGrace | toJson }}
max-message-bytes = {{ toString $c.maxMessageBytes | toJson }}
max-request-bytes = {{ toString $c.maxRequestBytes | toJson }}
store-retry-timeout = {{ toString $c.storeRetryTimeout | toJson }}
db-max-connections = {{ int64 $c.dbMaxConnections }}
max-connection-age = {{ toString $c.maxConnectionAge | toJson }}
stream-idle-timeout = {{ toString $c.streamIdleTimeout | toJson }}
max-connection-age-grace = {{ toString $c.maxConnectionAgeGrace | toJson }}
shutdown-grace = {{ printf "%ds" (int $c.shutdownGraceSeconds) | toJson }}
log-format = {{ toString $c.logFormat | toJson }}
tenant-records-per-second = {{ float64 $c.tenantRecordsPerSecond }}
tenant-bytes-per-second = {{ toString $c.tenantBytesPerSecond | toJson }}
tenant-burst = {{ toString $c.tenantBurst | toJson }}
retention = {{ toString $c.retention | toJson }}
retention-interval = {{ toString $c.retentionInterval | toJson }}
seal-after = {{ toString $c.sealAfter | toJson }}
seal-interval = {{ toString $c.sealInterval | toJson }}
seal-busy-percent = {{ int64 $c.sealBusyPercent }}
dedup-window = {{ toString $c.dedupWindow | toJson }}
read-max-connections = {{ int64 $c.readMaxConnections }}
max-tails-per-tenant = {{ int64 $c.maxTailsPerTenant }}
max-tails = {{ int64 $c.maxTails }}
max-concurrent-reads-per-tenant = {{ int64 $c.maxConcurrentReadsPerTenant }}
query-default-range = {{ toString $c.queryDefaultRange | toJson }}
query-timeout = {{ toString $c.queryTimeout | toJson }}
max-page-bytes = {{ toString $c.maxPageBytes | toJson }}
max-read-bytes = {{ toString $c.maxReadBytes | toJson }}
max-query-bytes = {{ toString $c.maxQueryBytes | toJson }}
max-query-series = {{ int64 $c.maxQuerySeries }}
tail-poll-interval = {{ toString $c.tailPollInterval | toJson }}
tail-queue-bytes = {{ toString $c.tailQueueBytes | toJson }}
api-keys-reload-interval = {{ toString $c.apiKeysReloadInterval | toJson }}
http-header-read-timeout = {{ toString $c.httpHeaderReadTimeout | toJson }}
http-max-connections = {{ int64 $c.httpMaxConnections }}
http-ingest-max-connections = {{ int64 $c.httpIngestMaxConnections }}
console-listen = {{ toString $c.consoleListen | toJson }}
{{- if .Values.tls.enabled }}
tls-cert = "/etc/loghaul-tls/tls.crt"
tls-key = "/etc/loghaul-tls/tls.key"
{{- if .Values.tls.clientAuth }}
tls-client-ca = "/etc/loghaul-tls/ca.crt"
{{- end }}
{{- end }}
{{- end }}

{{/* Base URL of the Grafana data source: grafanaDatasource.url, or this release's Service on the HTTP ingest port
(Grafana appends /loki/api/v1/...). */}}
{{- define "loghaul.grafanaDatasourceUrl" -}}
{{- if .Values.grafanaDatasource.url }}
{{- .Values.grafanaDatasource.url }}
{{- else }}
{{- printf "%s://%s.%s.svc:%d" (ternary "https" "http" .Values.tls.enabled) (include "loghaul.fullname" .) .Release.Namespace (int .Values.service.ports.http) }}
{{- end }}
{{- end }}

{{/* Grafana's data source provisioning file: loghaul as a Loki data source. The API key is sent as X-API-Key; it is a
${ENV} reference that Grafana expands when it loads the file, or, with apiKey.value, the key itself (then the file is
only ever rendered into a Secret). Grafana expands $ in every value of the file; "$$" is its literal "$". */}}
{{- define "loghaul.grafanaDatasourceFile" -}}
{{- $ds := .Values.grafanaDatasource }}
{{- $header := printf "${%s}" $ds.apiKey.envVar }}
{{- with $ds.apiKey.value }}
{{- $header = replace "$" "$$" (toString .) }}
{{- end -}}
# Grafana data source provisioning file, rendered by the loghaul Helm chart.
apiVersion: 1
datasources:
  - name: {{ toJson (toString $ds.name) }}
    type: loki
    access: proxy
    url: {{ include "loghaul.grafanaDatasourceUrl" . | toJson }}
    isDefault: {{ $ds.isDefault }}
    jsonData:
      maxLines: {{ int64 $ds.maxLines }}
      timeout: {{ int64 $ds.timeout }}
      httpHeaderName1: X-API-Key
    secureJsonData:
      httpHeaderValue1: {{ toJson $header }}
{{- end }}

{{/* Combinations that render but cannot work; fails with a message saying what to change. */}}
{{- define "loghaul.validate" -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "loghaul: tls.enabled needs tls.secretName (a kubernetes.io/tls Secret with tls.crt and tls.key)" }}
{{- end }}
{{- if and (include "loghaul.httpCorsOrigins" .) (not (include "loghaul.httpEnabled" .)) }}
{{- fail "loghaul: config.httpCorsOrigins needs config.httpListenEnabled (CORS applies to the HTTP ingest listener)" }}
{{- end }}
{{- if and .Values.tls.clientAuth (not .Values.tls.enabled) }}
{{- fail "loghaul: tls.clientAuth needs tls.enabled" }}
{{- end }}
{{- if and .Values.database.url .Values.database.existingSecret }}
{{- fail "loghaul: set either database.url or database.existingSecret, not both" }}
{{- end }}
{{- if and .Values.apiKeys .Values.apiKeysExistingSecret }}
{{- fail "loghaul: set either apiKeys or apiKeysExistingSecret, not both" }}
{{- end }}
{{- if .Values.grafanaDatasource.enabled }}
{{- if and (not .Values.grafanaDatasource.url) (not (include "loghaul.httpEnabled" .)) }}
{{- fail "loghaul: grafanaDatasource needs config.httpListenEnabled (Grafana queries the Loki API on the HTTP ingest port), or a grafanaDatasource.url to query instead" }}
{{- end }}
{{- $key := toString (default "" .Values.grafanaDatasource.apiKey.value) }}
{{- if and $key (not .Values.grafanaDatasource.url) .Values.apiKeys (not (hasKey .Values.apiKeys $key)) }}
{{- fail "loghaul: grafanaDatasource.apiKey.value is not one of apiKeys, so this release would refuse Grafana's queries; use one of its keys" }}
{{- end }}
{{- end }}
{{- if eq (include "loghaul.dbMode" .) "sqlite" }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "loghaul: SQLite mode supports at most one replica (replicaCount is %d): two pods must never share the database file. Use PostgreSQL (database.url=postgres://... or database.existingSecret) to run several replicas." (int .Values.replicaCount)) }}
{{- end }}
{{- if .Values.autoscaling.enabled }}
{{- fail "loghaul: autoscaling is not possible in SQLite mode (one pod owns the database file). Use PostgreSQL (database.url=postgres://... or database.existingSecret), or set autoscaling.enabled=false." }}
{{- end }}
{{- if not .Values.persistence.enabled }}
{{- fail "loghaul: SQLite mode needs persistence.enabled=true, or the logs are lost whenever the pod restarts. Enable persistence, or use PostgreSQL (database.url=postgres://... or database.existingSecret)." }}
{{- end }}
{{- $url := include "loghaul.databaseUrl" . }}
{{- if not (contains (printf "%s/" (trimSuffix "/" .Values.persistence.mountPath)) $url) }}
{{- fail (printf "loghaul: the SQLite file of database.url %q must live under persistence.mountPath %q, or it is lost on restart." $url .Values.persistence.mountPath) }}
{{- end }}
{{- end }}
{{- if .Values.autoscaling.enabled }}
{{- if gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas) }}
{{- fail "loghaul: autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- if and (not .Values.autoscaling.targetCPUUtilizationPercentage) (not .Values.autoscaling.queueUtilization.enabled) }}
{{- fail "loghaul: autoscaling needs a metric: set autoscaling.targetCPUUtilizationPercentage or enable autoscaling.queueUtilization" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod-level label selector used by anti-affinity and topology spread. */}}
{{- define "loghaul.podLabelSelector" -}}
matchLabels:
  {{- include "loghaul.selectorLabels" . | nindent 2 }}
{{- end }}
