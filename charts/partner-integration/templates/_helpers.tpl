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
gateway auth connection fileIntake extraction webhook
{{- end -}}

{{/* The services nobody calls (they consume events): no Service, no ingress but the kubelet's probes. */}}
{{- define "pi.workerServiceKeys" -}}
extraction
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

{{/* Every process's metrics port (METRICS_PORT, cluster-wide). Argument: the root context. */}}
{{- define "pi.metricsPort" -}}
{{- .Values.config.METRICS_PORT | int -}}
{{- end -}}

{{/* The services with admin RPCs, served on a port of their own (ADMIN_SERVICES of services/common/src/rpc/allowed-callers.ts). */}}
{{- define "pi.adminServiceKeys" -}}
auth connection webhook
{{- end -}}

{{/* A service's admin port (from the top-level config). Argument: dict ctx key. */}}
{{- define "pi.adminPort" -}}
{{- index .ctx.Values.config (printf "%s_ADMIN_PORT" (include "pi.component" .key | upper | replace "-" "_")) | int -}}
{{- end -}}

{{/* Every internal service's addresses by its headless Service (every replica): *_SERVICE_URL, and *_ADMIN_URL where it has admin RPCs. Argument: the root context. */}}
{{- define "pi.serviceUrlEnv" -}}
{{- $root := . -}}
{{- range $other := splitList " " (include "pi.dataServiceKeys" $root) }}
{{- $host := printf "http://%s-headless" (include "pi.name" (dict "ctx" $root "component" (include "pi.component" $other))) }}
{{- $setting := include "pi.component" $other | upper | replace "-" "_" }}
- name: {{ $setting }}_SERVICE_URL
  value: {{ printf "%s:%d" $host (include "pi.port" (dict "ctx" $root "key" $other) | int) | quote }}
{{- if has $other (splitList " " (include "pi.adminServiceKeys" $root)) }}
- name: {{ $setting }}_ADMIN_URL
  value: {{ printf "%s:%d" $host (include "pi.adminPort" (dict "ctx" $root "key" $other) | int) | quote }}
{{- end }}
{{- end }}
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

{{/* An image reference: repository:tag, and @digest when the image names one (the digest is what runs; the tag stays for people). Argument: dict image ctx. */}}
{{- define "pi.image" -}}
{{- printf "%s:%s" .image.repository (toString (default .ctx.Chart.AppVersion .image.tag)) -}}
{{- with .image.digest -}}@{{ . }}{{- end -}}
{{- end -}}

{{/* Egress to the cluster's DNS only (networkPolicy.dns): one rule, port 53 over UDP and TCP. Argument: the root context. */}}
{{- define "pi.dnsEgress" -}}
# DNS: the cluster's resolver only (networkPolicy.dns), no other address on port 53.
- to:
    {{- toYaml .Values.networkPolicy.dns.to | nindent 4 }}
  ports:
    - { port: 53, protocol: UDP }
    - { port: 53, protocol: TCP }
{{- end -}}

{{/*
The partner API's public origin (scheme://host, no path), or "" where the chart cannot know it:
the host of ingress.host, else of the HTTPRoute's only hostname (httpRoute.hostnames, not a
wildcard), when the Ingress or the HTTPRoute publishes the gateway; https unless the entry serves
plain HTTP only (ingress.https.enabled false, no ingress.tls, and no Gateway of the operator's).
Argument: the root context.
*/}}
{{- define "pi.publicOrigin" -}}
{{- $v := .Values -}}
{{- $host := "" -}}
{{- if and $v.gateway.enabled (or $v.ingress.enabled $v.httpRoute.enabled) -}}
{{- if $v.ingress.host -}}
{{- $host = $v.ingress.host -}}
{{- else if and $v.httpRoute.enabled (eq (len $v.httpRoute.hostnames) 1) (not (hasPrefix "*" (first $v.httpRoute.hostnames))) -}}
{{- $host = first $v.httpRoute.hostnames -}}
{{- end -}}
{{- end -}}
{{- if $host -}}
{{- $https := or $v.ingress.https.enabled (not (empty $v.ingress.tls)) (and $v.httpRoute.enabled (not $v.httpRoute.gateway.create)) -}}
{{- printf "%s://%s" (ternary "https" "http" $https) $host -}}
{{- end -}}
{{- end -}}

{{/*
TOKEN_ENDPOINT_URL as the services get it (the aud of private_key_jwt assertions; the discovery
documents' token_endpoint, and their issuer without /oauth/token): config.TOKEN_ENDPOINT_URL (the
service's own config first), else <public origin>/oauth/token. Where neither is known and
auth.privateKeyJwt is true, the render fails naming the value to set: a loopback address would make
every genuine assertion fail. "" when unknown and private_key_jwt is not in use. Argument: dict ctx config.
*/}}
{{- define "pi.tokenEndpointUrl" -}}
{{- $url := .config.TOKEN_ENDPOINT_URL | default "" -}}
{{- if not $url -}}
{{- with include "pi.publicOrigin" .ctx -}}{{- $url = printf "%s/oauth/token" . -}}{{- end -}}
{{- end -}}
{{- if and (not $url) .ctx.Values.auth.privateKeyJwt -}}
{{- fail "the token endpoint's public URL is unknown, and auth.privateKeyJwt is true (partners may authenticate with private_key_jwt, whose assertions must name that URL as their aud): set ingress.host (the partner API's host name), or httpRoute.hostnames (one name), or config.TOKEN_ENDPOINT_URL (https://HOST/oauth/token, where a proxy of yours publishes the gateway); or set auth.privateKeyJwt=false if every partner authenticates with a client secret" -}}
{{- end -}}
{{- $url -}}
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

{{/*
Scheduling and common pod fields shared by every pod of the release. Argument: the root context, or
dict ctx component block, where block is the component's values block (its affinity,
topologySpreadConstraints, priorityClassName and podAntiAffinity override the top-level ones):
  - affinity: the block's, else the top-level one; with podAntiAffinity "preferred" (or "required")
    a podAntiAffinity on the node (kubernetes.io/hostname) against the component's own pods is added
    where the affinity has none;
  - topologySpreadConstraints: the block's, else with topologySpread.enabled one constraint per
    topologySpread.topologyKeys (nodes and zones), on the component's own pods, whenUnsatisfiable
    topologySpread.whenUnsatisfiable (ScheduleAnyway: a one-node or one-zone cluster still schedules);
  - priorityClassName: the block's.
*/}}
{{- define "pi.podCommon" -}}
{{- $root := . -}}
{{- $component := "" -}}
{{- $block := dict -}}
{{- if hasKey . "ctx" -}}
{{- $root = .ctx -}}{{- $component = .component -}}{{- $block = default dict .block -}}
{{- end -}}
{{- $v := $root.Values -}}
serviceAccountName: {{ include "pi.serviceAccountName" $root }}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $block.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- $affinity := deepCopy (default $v.affinity $block.affinity | default dict) }}
{{- $anti := default $v.podAntiAffinity $block.podAntiAffinity }}
{{- if and $component $anti (not (hasKey $affinity "podAntiAffinity")) }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "pi.selectorLabels" (dict "ctx" $root "component" $component) | fromYaml)) }}
{{- if eq $anti "required" }}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- else if eq $anti "preferred" }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- end }}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $component }}
{{- $spread := $block.topologySpreadConstraints }}
{{- if and (not $spread) $v.topologySpread.enabled }}
{{- $spread = list }}
{{- range $key := $v.topologySpread.topologyKeys }}
{{- $spread = append $spread (dict "maxSkew" (int $v.topologySpread.maxSkew) "topologyKey" $key "whenUnsatisfiable" $v.topologySpread.whenUnsatisfiable "labelSelector" (dict "matchLabels" (include "pi.selectorLabels" (dict "ctx" $root "component" $component) | fromYaml))) }}
{{- end }}
{{- end }}
{{- with $spread }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
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

{{/*
Topics, from DATA_NAMESPACE: [name, partitions, retention.ms, retention.bytes (per partition),
segment.bytes, segment.ms], the retention as services/common/src/events/topics.ts declares it (a chart test
compares them; the arithmetic is in docs/security.md, "Stores a partner can grow").
*/}}
{{- define "pi.topics" -}}
{{- $ns := .Values.config.DATA_NAMESPACE -}}
{{- $p := .Values.kafka.topics.partitions -}}
{{- $week := 604800000 -}}
{{- $day := 86400000 -}}
{{- $mib := 1048576 -}}
{{- $seg := mul 32 $mib -}}
{{- list (list (printf "%s.connection-events" $ns) (int $p.connectionEvents) $week (mul 128 $mib) $seg $day) (list (printf "%s.file-events" $ns) (int $p.fileEvents) $week (mul 128 $mib) $seg $day) (list (printf "%s.partner-events" $ns) (int $p.partnerEvents) $week (mul 64 $mib) $seg $day) (list (printf "%s.audit-events" $ns) (int $p.auditEvents) $week (mul 512 $mib) $seg $day) | toJson -}}
{{- end -}}

{{/* Replication factor for the in-cluster Kafka: min(3, replicas). */}}
{{- define "pi.kafkaReplicationFactor" -}}
{{- min 3 (int .Values.kafka.replicas) -}}
{{- end -}}

{{/* Every workload with a service identity: the services and the operator CLI's pod (values keys). */}}
{{- define "pi.identityKeys" -}}
gateway auth connection fileIntake extraction webhook ops
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
services/common/src/events/kafka-access.ts (KAFKA_USERS; test/deploy/chart.test.ts compares them).
*/}}
{{- define "pi.kafkaUsers" -}}
{{- toJson (list "gateway" "auth" "connection" "file-intake" "extraction" "webhook") -}}
{{- end -}}

{{/* The Secret of the Kafka users' passwords: kafka.auth.existingSecret, else the chart's own. */}}
{{- define "pi.kafkaUsersSecret" -}}
{{- .Values.kafka.auth.existingSecret | default (printf "%s-kafka-users" (include "pi.prefix" .)) -}}
{{- end -}}

{{/*
Whether this render can ask the cluster (helm install, upgrade, --dry-run=server): a list of the
release namespace's Secrets is a list object then (empty, too, when the namespace does not exist
yet), and an empty map when the render has no cluster to ask (helm template, helm lint, --dry-run
without =server, GitOps tools that render with `helm template`). Listing Secrets in the namespace is
something every `helm install` does anyway (Helm keeps its releases there), so it needs no right
the installer lacks.
*/}}
{{- define "pi.clusterReachable" -}}
{{- if lookup "v1" "Secret" .Release.Namespace "" -}}true{{- end -}}
{{- end -}}

{{/*
The one rule for every secret the chart generates (docs/security.md, "Generated secrets"), called
when a secret was neither given (value, existingSecret) nor found in the cluster. Fails, or returns
"true" when generating is allowed:
  - generateSecrets "never": fails (every secret must be given);
  - a render without a cluster to ask: fails unless generateSecrets is "always", since it would
    generate a new secret at every render and break everything that depends on the old one;
  - a render against the cluster: fails when an object that depends on the old secret is still
    there (`witnesses`: [kind, name] pairs, apiVersion included: e.g. the database's volume claim),
    since a new secret would lock it out; else generates (a first install, or a newly enabled part).
Argument: dict ctx what (a sentence subject) secret (its name) hint (the values to set) witnesses.
*/}}
{{- define "pi.mayGenerate" -}}
{{- $mode := .ctx.Values.generateSecrets -}}
{{- if eq $mode "never" -}}
{{- fail (printf "%s (Secret %s): generateSecrets is \"never\" and none is given: set %s" .what .secret .hint) -}}
{{- end -}}
{{- if not (include "pi.clusterReachable" .ctx) -}}
{{- if ne $mode "always" -}}
{{- fail (printf "%s (Secret %s) cannot be generated: this render has no cluster to look the existing one up in (helm template, helm lint, --dry-run without =server, a GitOps tool rendering with helm template), so it would make a new one at every render and everything that depends on it would break. Set %s; or render against the cluster (helm install/upgrade, --dry-run=server); or set generateSecrets=always for a throwaway render (docs/security.md, \"Generated secrets\"). In all, these values need a secret of yours: %s" .what .secret .hint (include "pi.secretsToGive" .ctx)) -}}
{{- end -}}
{{- else -}}
{{- $ns := .ctx.Release.Namespace -}}
{{- range $w := (default list .witnesses) -}}
{{- if lookup (index $w 0) (index $w 1) $ns (index $w 2) -}}
{{- fail (printf "%s (Secret %s) is not in the cluster, but %s %s, which depends on it, is: refusing to generate a new one (it would be locked out). Restore the Secret, or set %s" $.what $.secret (index $w 1) (index $w 2) $.hint) -}}
{{- end -}}
{{- end -}}
{{- end -}}
true
{{- end -}}

{{/*
The database a data service owns, as services/common/src/store/mongo.ts names it:
<DATA_NAMESPACE>_<component, "-" as "_">, with the service's own DATA_NAMESPACE. Argument: dict ctx key.
*/}}
{{- define "pi.mongoDatabase" -}}
{{- $svc := index .ctx.Values .key -}}
{{- $ns := (merge (deepCopy (default dict $svc.config)) (deepCopy .ctx.Values.config)).DATA_NAMESPACE -}}
{{- printf "%s_%s" $ns (include "pi.component" .key | replace "-" "_") -}}
{{- end -}}

{{/* name and key of the Secret with a data service's own database password. Argument: dict ctx key. */}}
{{- define "pi.mongoUserSecretRef" -}}
{{- $auth := (index .ctx.Values .key).mongodb.auth -}}
{{- if $auth.existingSecret -}}
name: {{ $auth.existingSecret }}
key: {{ $auth.existingSecretKey }}
{{- else -}}
name: {{ include "pi.name" (dict "ctx" .ctx "component" (printf "%s-mongodb-user" (include "pi.component" .key))) }}
key: mongodb-password
{{- end -}}
{{- end -}}

{{/* name and key of the Secret with the password of the auth database's audit-retention user. Argument: the root context. */}}
{{- define "pi.auditRetentionSecretRef" -}}
{{- $auth := .Values.auth.mongodb.auth -}}
{{- if $auth.auditRetentionExistingSecret -}}
name: {{ $auth.auditRetentionExistingSecret }}
key: {{ $auth.auditRetentionExistingSecretKey }}
{{- else -}}
name: {{ include "pi.name" (dict "ctx" . "component" "auth-mongodb-audit-retention") }}
key: mongodb-password
{{- end -}}
{{- end -}}

{{/* The database user of the auth service's audit retention sweep (role auditRetention). */}}
{{- define "pi.auditRetentionUser" -}}auth-audit-retention{{- end -}}

{{/*
The env entries of a data service's database: MONGODB_URI from the operator's Secret (external), a
URI without credentials (the stand-in), or the service's own user, its password from its Secret
and spliced into the URI by the kubelet ($(MONGODB_PASSWORD)). Argument: dict ctx key.
*/}}
{{- define "pi.mongoEnv" -}}
{{- $svc := index .ctx.Values .key -}}
{{- $host := include "pi.name" (dict "ctx" .ctx "component" (printf "%s-mongodb" (include "pi.component" .key))) -}}
{{- $db := include "pi.mongoDatabase" . -}}
{{- if $svc.mongodb.external.existingSecret -}}
- name: MONGODB_URI
  valueFrom:
    secretKeyRef:
      name: {{ $svc.mongodb.external.existingSecret }}
      key: {{ $svc.mongodb.external.existingSecretKey }}
{{- else if .ctx.Values.mongodb.standIn.enabled -}}
- name: MONGODB_URI
  value: {{ printf "mongodb://%s:27017/" $host | quote }}
{{- else -}}
- name: MONGODB_PASSWORD
  valueFrom:
    secretKeyRef:
      {{- include "pi.mongoUserSecretRef" . | nindent 6 }}
- name: MONGODB_URI
  value: {{ printf "mongodb://%s:$(MONGODB_PASSWORD)@%s:27017/%s?authSource=%s" (include "pi.component" .key) $host $db $db | quote }}
{{- if eq .key "auth" }}
# The audit retention sweep's own user (role auditRetention: find and remove on the audit
# database); the service's user above may only append there.
- name: AUDIT_RETENTION_MONGODB_PASSWORD
  valueFrom:
    secretKeyRef:
      {{- include "pi.auditRetentionSecretRef" .ctx | nindent 6 }}
- name: AUDIT_RETENTION_MONGODB_URI
  value: {{ printf "mongodb://%s:$(AUDIT_RETENTION_MONGODB_PASSWORD)@%s:27017/%s_audit?authSource=%s" (include "pi.auditRetentionUser" .ctx) $host $db $db | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* Every value that needs a Secret of the operator's for this render to generate none (for the message above). */}}
{{- define "pi.secretsToGive" -}}
{{- $v := .Values -}}
{{- $out := list -}}
{{- if and $v.auth.enabled (not $v.auth.credentialPepper.existingSecret) (not $v.auth.credentialPepper.value) -}}
{{- $out = append $out "auth.credentialPepper.existingSecret" -}}
{{- end -}}
{{- if and (or $v.auth.enabled $v.fileIntake.enabled) (not $v.dataKeys.existingSecret) (not $v.dataKeys.value) -}}
{{- $out = append $out "dataKeys.existingSecret" -}}
{{- end -}}
{{- range $key := splitList " " (include "pi.identityKeys" .) -}}
{{- $b := index $v $key -}}
{{- if and $b.enabled (not $b.identity.existingSecret) -}}
{{- $out = append $out (printf "%s.identity.existingSecret (with publicKey)" $key) -}}
{{- end -}}
{{- end -}}
{{- range $key := splitList " " (include "pi.dataServiceKeys" .) -}}
{{- $b := index $v $key -}}
{{- if and $b.enabled (not $b.mongodb.external.existingSecret) (not $v.mongodb.standIn.enabled) -}}
{{- if not $b.mongodb.auth.rootExistingSecret -}}{{- $out = append $out (printf "%s.mongodb.auth.rootExistingSecret" $key) -}}{{- end -}}
{{- if not $b.mongodb.auth.existingSecret -}}{{- $out = append $out (printf "%s.mongodb.auth.existingSecret" $key) -}}{{- end -}}
{{- if and (eq $key "auth") (not $b.mongodb.auth.auditRetentionExistingSecret) -}}{{- $out = append $out "auth.mongodb.auth.auditRetentionExistingSecret" -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not $v.kafka.external.brokers) (not $v.kafka.auth.existingSecret) -}}
{{- $out = append $out "kafka.auth.existingSecret" -}}
{{- end -}}
{{- $i := $v.ingress -}}
{{- if and $i.enabled $v.gateway.enabled $i.https.enabled (not $i.tls) (not $i.https.existingSecret) (not $i.https.certManager.clusterIssuer) (not $i.https.certManager.issuer) -}}
{{- $out = append $out "ingress.https.existingSecret (or ingress.https.certManager)" -}}
{{- end -}}
{{- join ", " $out -}}
{{- end -}}

{{/* A data service's database volume size: its own mongodb.persistence.size, else the shared one. */}}
{{- define "pi.mongoVolumeSize" -}}
{{- $svc := index .ctx.Values .key -}}
{{- dig "mongodb" "persistence" "size" "" $svc | default .ctx.Values.mongodb.persistence.size -}}
{{- end -}}

{{/* A Kubernetes quantity ("8Gi", "500M", "1.5Gi", "1073741824") in bytes, as a float. */}}
{{- define "pi.bytes" -}}
{{- $q := toString . -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $n $q -}}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- if or (not $n) (not (hasKey $units $unit)) -}}
{{- fail (printf "%q is not a size this chart reads (a number with Ki, Mi, Gi, Ti, k, M, G or T)" $q) -}}
{{- end -}}
{{- mulf (float64 $n) (index $units $unit) -}}
{{- end -}}

{{/*
Sizes that must agree (docs/files.md, "Store-wide high-water mark"): file-intake's high-water mark
at most 80% of its database volume (the rest: MongoDB's own files, and uploads in flight when the
mark is crossed), and one partner's live and test quotas together under the mark; the topics'
retention within 80% of Kafka's volume (docs/security.md, "Stores a partner can grow").
*/}}
{{- define "pi.checkSizes" -}}
{{- $cfg := mergeOverwrite (deepCopy .Values.config) (.Values.fileIntake.config | default dict) -}}
{{- $mark := float64 $cfg.FILE_STORE_HIGH_WATER_BYTES -}}
{{- $quotas := addf (float64 $cfg.FILE_STORAGE_QUOTA_BYTES) (float64 $cfg.TEST_FILE_STORAGE_QUOTA_BYTES) -}}
{{- if gt $quotas $mark -}}
{{- fail (printf "FILE_STORAGE_QUOTA_BYTES + TEST_FILE_STORAGE_QUOTA_BYTES (%.0f bytes) cannot fit under FILE_STORE_HIGH_WATER_BYTES (%.0f bytes): one partner could fill the whole store" $quotas $mark) -}}
{{- end -}}
{{- if and .Values.fileIntake.enabled .Values.mongodb.persistence.enabled (not (include "pi.mongoExternal" (dict "ctx" . "key" "fileIntake"))) -}}
{{- $size := include "pi.mongoVolumeSize" (dict "ctx" . "key" "fileIntake") -}}
{{- $volume := float64 (include "pi.bytes" $size) -}}
{{- if gt $mark (mulf $volume 0.8) -}}
{{- fail (printf "FILE_STORE_HIGH_WATER_BYTES (%.0f bytes) is above 80%% of file-intake's database volume (%s): raise fileIntake.mongodb.persistence.size or lower the mark (and the storage quotas under it)" $mark $size) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.kafka.persistence.enabled (not .Values.kafka.external.brokers) -}}
{{- $retained := 0.0 -}}
{{- range $t := fromJsonArray (include "pi.topics" .) -}}
{{- $retained = addf $retained (mulf (float64 (index $t 1)) (addf (float64 (index $t 3)) (float64 (index $t 4)))) -}}
{{- end -}}
{{- $kafkaVolume := float64 (include "pi.bytes" .Values.kafka.persistence.size) -}}
{{- if gt $retained (mulf $kafkaVolume 0.8) -}}
{{- fail (printf "the topics may retain %.0f bytes (partitions x (retention.bytes + segment.bytes)), above 80%% of kafka.persistence.size (%s)" $retained .Values.kafka.persistence.size) -}}
{{- end -}}
{{- end -}}
{{- end -}}
