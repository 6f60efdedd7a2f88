{{/*
Prefix of every object name: fullnameOverride, else the release name. Kept short enough that
"<prefix>-file-intake-mongodb" stays a valid StatefulSet name (pods add a revision-hash label).
*/}}
{{- define "pi.prefix" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 30 | trimSuffix "-" -}}
{{- end -}}

{{- define "pi.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The application services, in a fixed order: their values keys. */}}
{{- define "pi.serviceKeys" -}}
gateway auth connection fileIntake webhook
{{- end -}}

{{/* The services that own a database. */}}
{{- define "pi.dataServiceKeys" -}}
auth connection fileIntake webhook
{{- end -}}

{{/* Component (and object-name suffix) of a values key: fileIntake -> file-intake. */}}
{{- define "pi.component" -}}
{{- kebabcase . -}}
{{- end -}}

{{/* The config key holding a service's port. */}}
{{- define "pi.portKey" -}}
{{- if eq . "gateway" -}}GATEWAY_PORT{{- else -}}{{ include "pi.component" . | upper | replace "-" "_" }}_SERVICE_PORT{{- end -}}
{{- end -}}

{{/* A service's port (from the top-level config). Argument: dict ctx key. */}}
{{- define "pi.port" -}}
{{- index .ctx.Values.config (include "pi.portKey" .key) | int -}}
{{- end -}}

{{/* Name of an object of a component. Argument: dict ctx component. */}}
{{- define "pi.name" -}}
{{- printf "%s-%s" (include "pi.prefix" .ctx) .component -}}
{{- end -}}

{{- define "pi.selectorLabels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "pi.labels" -}}
{{ include "pi.selectorLabels" . }}
app.kubernetes.io/part-of: partner-integration
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ include "pi.chart" .ctx }}
{{- end -}}

{{/* Labels of the release's pods as a whole (used by the deny-all policy). */}}
{{- define "pi.releaseSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pi.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pi.prefix" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* An image reference. Argument: dict image ctx. */}}
{{- define "pi.image" -}}
{{- printf "%s:%s" .image.repository (toString (default .ctx.Chart.AppVersion .image.tag)) -}}
{{- end -}}

{{/*
A setting as an environment-variable string. Values from values.yaml arrive as float64, so whole
numbers are printed as integers (26214400, not 2.62144e+07); fractions stay as they are; lists and
maps (API_DEPRECATIONS) become JSON.
*/}}
{{- define "pi.envValue" -}}
{{- if or (kindIs "slice" .) (kindIs "map" .) -}}
{{- toJson . -}}
{{- else if kindIs "float64" . -}}
{{- if eq . (floor .) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/* host:port list of the Kafka brokers. */}}
{{- define "pi.kafkaBrokers" -}}
{{- if .Values.kafka.external.brokers -}}
{{- .Values.kafka.external.brokers -}}
{{- else -}}
{{- printf "%s:9092" (include "pi.name" (dict "ctx" . "component" "kafka")) -}}
{{- end -}}
{{- end -}}

{{/* Ports of the external Kafka brokers, as a list of numbers (for the NetworkPolicy). */}}
{{- define "pi.kafkaExternalPorts" -}}
{{- $ports := list -}}
{{- range splitList "," .Values.kafka.external.brokers -}}
{{- $ports = append $ports (regexReplaceAll "^.*:" (trim .) "" | int) -}}
{{- end -}}
{{- $ports | uniq | toJson -}}
{{- end -}}

{{/* Whether a data service uses an external database. Argument: dict ctx key. */}}
{{- define "pi.mongoExternal" -}}
{{- $svc := index .ctx.Values .key -}}
{{- if $svc.mongodb.external.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* The Secret and key holding a data service's MONGODB_URI. Argument: dict ctx key. */}}
{{- define "pi.mongoUriSecretName" -}}
{{- $svc := index .ctx.Values .key -}}
{{- if $svc.mongodb.external.existingSecret -}}
{{- $svc.mongodb.external.existingSecret -}}
{{- else -}}
{{- include "pi.name" (dict "ctx" .ctx "component" (printf "%s-mongodb" (include "pi.component" .key))) -}}
{{- end -}}
{{- end -}}

{{- define "pi.mongoUriSecretKey" -}}
{{- $svc := index .ctx.Values .key -}}
{{- if $svc.mongodb.external.existingSecret -}}
{{- $svc.mongodb.external.existingSecretKey -}}
{{- else -}}
uri
{{- end -}}
{{- end -}}

{{/* Pod-level security context. Argument: the uid (and gid) to run as. */}}
{{- define "pi.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
fsGroup: {{ . }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "pi.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Scheduling and common pod fields shared by every pod of the release. */}}
{{- define "pi.podCommon" -}}
serviceAccountName: {{ include "pi.serviceAccountName" . }}
automountServiceAccountToken: false
enableServiceLinks: false
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
{{- end -}}

{{/* Pod metadata labels and annotations. Argument: dict ctx component [annotations]. */}}
{{- define "pi.podMetadata" -}}
labels:
  {{- include "pi.labels" . | nindent 2 }}
  {{- with .ctx.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with merge (deepCopy (default dict .annotations)) (deepCopy (default dict .ctx.Values.podAnnotations)) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Topic names, from DATA_NAMESPACE (as services/common/src/topics.ts). */}}
{{- define "pi.topics" -}}
{{- $ns := .Values.config.DATA_NAMESPACE -}}
{{- $p := .Values.kafka.topics.partitions -}}
{{- list (list (printf "%s.connection-events" $ns) (int $p.connectionEvents)) (list (printf "%s.file-events" $ns) (int $p.fileEvents)) (list (printf "%s.partner-events" $ns) (int $p.partnerEvents)) (list (printf "%s.audit-events" $ns) (int $p.auditEvents)) | toJson -}}
{{- end -}}

{{/* Replication factor for the in-cluster Kafka: min(3, replicas). */}}
{{- define "pi.kafkaReplicationFactor" -}}
{{- min 3 (int .Values.kafka.replicas) -}}
{{- end -}}

{{/* Every workload with a service identity: the services and the operator CLI's pod (values keys). */}}
{{- define "pi.identityKeys" -}}
gateway auth connection fileIntake webhook ops
{{- end -}}

{{/* The Secret holding a workload's SERVICE_IDENTITY_KEY. Argument: dict ctx key. */}}
{{- define "pi.identitySecretName" -}}
{{- $id := (index .ctx.Values .key).identity -}}
{{- default (printf "%s-%s-identity" (include "pi.prefix" .ctx) (include "pi.component" .key)) $id.existingSecret -}}
{{- end -}}

{{/* The env entries of a workload's service identity. Argument: dict ctx key. */}}
{{- define "pi.identityEnv" -}}
{{- $id := (index .ctx.Values .key).identity -}}
- name: SERVICE_IDENTITY_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "pi.identitySecretName" . }}
      key: {{ ternary $id.existingSecretKey "SERVICE_IDENTITY_KEY" (ne $id.existingSecret "") }}
- name: SERVICE_IDENTITY_PUBLIC_KEYS
  valueFrom:
    configMapKeyRef:
      name: {{ include "pi.prefix" .ctx }}-service-identity
      key: SERVICE_IDENTITY_PUBLIC_KEYS
{{- end -}}

{{/*
The Kafka users besides the super user "admin": one per workload that uses Kafka, as in
services/common/src/kafka-access.ts (KAFKA_USERS; test/deploy/chart.test.ts compares them).
*/}}
{{- define "pi.kafkaUsers" -}}
{{- toJson (list "gateway" "auth" "connection" "file-intake" "webhook") -}}
{{- end -}}

{{/* The Secret of the Kafka users' passwords: kafka.auth.existingSecret, else the chart's own. */}}
{{- define "pi.kafkaUsersSecret" -}}
{{- .Values.kafka.auth.existingSecret | default (printf "%s-kafka-users" (include "pi.prefix" .)) -}}
{{- end -}}
