#!/usr/bin/env bash
# npm run test:cluster: the chart on a real Kubernetes, end to end.
#
#   1. deploy/cluster/up.sh (reuses a running cluster)
#   2. builds the images (services, Kafka, MongoDB-wire stand-in) and loads them into the node
#   3. the upgrade from the previous release (releases.json): its own chart and images (built from its
#      commit by images/release.sh, cached by commit), data written through the partner API and the
#      operator CLI, `helm upgrade` to this commit and `helm rollback` under partner traffic
#      (test/cluster/release-upgrade.test.ts); step 4 then upgrades the rolled-back release to this commit
#   4. a namespace labelled for PodSecurity "restricted" enforcement; helm install --wait with the
#      chart's production values (charts/partner-integration/values-production.yaml), then
#      deploy/cluster/values.yaml (this cluster's images, host, in-chart stand-in stores) and
#      deploy/cluster/values-sizes.yaml (smaller requests: two replicas of everything on 2 cores)
#   5. readiness: /readyz of the gateway through a port-forward (the ingress does not publish it),
#      then the partner API through Traefik over HTTPS (the chart's HTTPRoute on the Gateway it
#      created: values.yaml), its certificate verified against the CA the chart generated (ca.crt of
#      <release>-gateway-tls)
#   6. jest (jest.cluster.config.js): the black-box suite (test/blackbox) through the ingress
#      (https://partner-api.pi.test, resolved to the ingress by test/support/resolve.cjs, the CA in
#      NODE_EXTRA_CA_CERTS; readiness through the port-forward, E2E_READY_URL), the operator CLI
#      through `kubectl exec` in the ops pod (deploy/<release>-ops), and test/cluster (NetworkPolicies
#      admit callers and refuse others, a rolling upgrade and a deleted pod under traffic, PDB/HPA
#      objects, what the HTTPRoute publishes and how, secrets that a render against the cluster keeps,
#      every pod's metrics port read through the API server's pod proxy)
#   7. partners' own tools through the ingress (deploy/checks/partner-tools.sh against
#      https://partner-api.pi.test): OAuth client libraries, Authlib's private_key_jwt on the token
#      endpoint it discovered, Stripe's verifiers on webhooks the release delivered to a receiver on
#      this machine (a public address on the cluster's bridge, named by a Service of the namespace, its
#      certificate from a CA made here and trusted by the webhook service), TLS verified everywhere
#   8. helm test
#   9. helm uninstall --wait, then nothing of the release may be left (PVCs included); the namespace
#      goes, and the storage pool's volumes are wiped
#
# Environment: KEEP=1 leaves the release installed (and skips 9) for a look around; CLUSTER_UPGRADE=0
# leaves out step 3.
# Ends with one line "N passed, M failed" (one per step).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
NS=${CLUSTER_NAMESPACE:-pi-e2e}
RELEASE=${CLUSTER_RELEASE:-pi}
export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$BIN:$PATH
# The partner API's name (ingress.host of values.yaml), resolved to the ingress by the tests themselves.
HOST=$(sed -n 's/^  host: *//p' "$HERE/values.yaml" | head -n 1)
WORK=$(mktemp -d)
VALUES=("$ROOT/charts/partner-integration/values-production.yaml" "$HERE/values.yaml" "$HERE/values-sizes.yaml")
# The webhook receiver of the partner tools (step 7) and of the upgrade step (3): on the node's own address on the cluster's
# bridge (pods reach it; values.yaml lets the webhook service call this private address), named by a
# selector-less Service of the namespace, with a certificate of a CA made here.
RECEIVER_IP=${PT_RECEIVER_IP:-$NODE_IP}
RECEIVER_HOST=partner-webhooks.$NS.svc.cluster.local
PF_PORT=$((20000 + RANDOM % 10000))
pf_loop=""
cleanup() {
  [ -n "$pf_loop" ] && kill "$pf_loop" 2>/dev/null
  [ -f "$WORK/pf.pid" ] && kill "$(cat "$WORK/pf.pid")" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
passed=0 failed=0 t_start=$(date +%s)
result() { # name status seconds
  if [ "$2" = 0 ]; then passed=$((passed + 1)); log "PASS $1 (${3}s)"; else failed=$((failed + 1)); log "FAIL $1 (${3}s)"; fi
}
step() { # name command...: runs a step, records its result; returns its status
  local name=$1 t=$(date +%s) rc; shift
  log "== $name"
  "$@"; rc=$?
  result "$name" $rc $(( $(date +%s) - t ))
  return $rc
}
finish() {
  log "test:cluster took $(( $(date +%s) - t_start ))s"
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
  exit $?
}

step "cluster up" "$HERE/up.sh" || finish
HELM=$(cd "$ROOT" && node deploy/checks/helm.mjs) || { result "helm" 1 0; finish; }

images() {
  local out
  out=$("$HERE/images/services.sh") || return 1; eval "$(echo "$out" | grep '^SERVICES_TAG=')"
  out=$("$HERE/images/jvm.sh") || return 1; eval "$(echo "$out" | grep -E '^(KAFKA|MONGO_WIRE)_IMAGE=')"
  # Without them the chart's default tags would be installed, which no node has (ErrImageNeverPull).
  [ -n "${SERVICES_TAG:-}" ] && [ -n "${KAFKA_IMAGE:-}" ] && [ -n "${MONGO_WIRE_IMAGE:-}" ] || {
    echo "an image was built but not named: SERVICES_TAG='${SERVICES_TAG:-}' KAFKA_IMAGE='${KAFKA_IMAGE:-}' MONGO_WIRE_IMAGE='${MONGO_WIRE_IMAGE:-}'" >&2
    return 1
  }
}
step "images built and loaded" images || finish

namespace() { # the namespace, PodSecurity "restricted", and the partner tools' CA (once per run)
  kubectl get ns "$NS" >/dev/null 2>&1 || kubectl create ns "$NS" >/dev/null || return 1
  kubectl label --overwrite ns "$NS" pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/enforce-version=latest >/dev/null || return 1
  # The partner tools' CA (made here): the webhook service trusts it (values.yaml mounts this
  # ConfigMap, optional, for NODE_EXTRA_CA_CERTS), and it signs the webhook receiver's certificate.
  [ -f "$WORK/receiver.crt" ] || partner_ca || return 1
  kubectl -n "$NS" create configmap partner-tools-ca --from-file=ca.crt="$WORK/partner-ca.crt" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
}
partner_ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=partner-tools test CA" \
    -keyout "$WORK/partner-ca.key" -out "$WORK/partner-ca.crt" 2>/dev/null || return 1
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$RECEIVER_HOST" -keyout "$WORK/receiver.key" -out "$WORK/receiver.csr" 2>/dev/null || return 1
  printf 'subjectAltName=DNS:%s\n' "$RECEIVER_HOST" >"$WORK/receiver.ext"
  openssl x509 -req -in "$WORK/receiver.csr" -CA "$WORK/partner-ca.crt" -CAkey "$WORK/partner-ca.key" -CAcreateserial -days 2 \
    -extfile "$WORK/receiver.ext" -out "$WORK/receiver.crt" 2>/dev/null
}
image_values() { # services-tag kafka-image mongo-wire-image: the chart's image values, one key=value a line
  local k
  for k in gateway auth connection fileIntake extraction webhook ops; do echo "$k.image.tag=$1"; done
  echo "kafka.image.repository=${2%:*}"; echo "kafka.image.tag=${2##*:}"
  echo "mongodb.standIn.image.repository=${3%:*}"; echo "mongodb.standIn.image.tag=${3##*:}"
}
install() {
  namespace || return 1
  local sets=() kv
  while read -r kv; do sets+=(--set "$kv"); done < <(image_values "$SERVICES_TAG" "$KAFKA_IMAGE" "$MONGO_WIRE_IMAGE")
  local files=()
  for f in "${VALUES[@]}"; do files+=(-f "$f"); done
  "$HELM" upgrade --install "$RELEASE" "$ROOT/charts/partner-integration" -n "$NS" \
    "${files[@]}" "${sets[@]}" --wait --timeout 15m
}
ingress_ready() { # the partner API through the ingress over HTTPS, verified against the chart's CA ($WORK/ca.crt)
  for _ in $(seq 1 60); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$WORK/ca.crt" --resolve "$HOST:443:$INGRESS_IP" "https://$HOST/openapi.json")" = 200 ] && return 0
    sleep 2
  done
  curl -sv --cacert "$WORK/ca.crt" --resolve "$HOST:443:$INGRESS_IP" "https://$HOST/openapi.json" -o /dev/null; return 1
}
# The Service that names the webhook receiver (on the node's bridge address) for the webhook service.
receiver_address() {
  kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: { name: partner-webhooks }
spec:
  clusterIP: None
  ports: [{ name: https, port: 443, protocol: TCP }]
---
apiVersion: v1
kind: Endpoints
metadata: { name: partner-webhooks }
subsets:
  - addresses: [{ ip: "$RECEIVER_IP" }]
    ports: [{ name: https, port: 443, protocol: TCP }]
YAML
}
# The previous release (the last of releases.json's `releases`): its commit, version and chart version.
read -r PREV_COMMIT PREV_VERSION PREV_CHART < <(node -p 'const r = require(process.argv[1]).releases.at(-1); `${r.commit} ${r.version} ${r.chart}`' "$ROOT/releases.json")
# Settings of both releases for the step only: webhook retries every few seconds (at most 112 s apart,
# for 15 minutes: the pending deliveries the previous release could not send go out soon after the
# upgrade), the sandbox's automatic approval after 5 s (partners' webhooks during each rollout), and
# the receiver's private address allowed (values.yaml's setting, which the previous release's own
# cluster values lack).
UPGRADE_SETTINGS=(config.WEBHOOK_RETRY_BASE_SECONDS=2 config.WEBHOOK_RETRY_WINDOW_SECONDS=900 config.SANDBOX_APPROVAL_DELAY_SECONDS=5 config.WEBHOOK_ALLOW_INSECURE_URLS=true)
upgrade_and_rollback() {
  # A release left by an earlier run (KEEP=1, a failure) goes first: the previous release is installed new.
  if "$HELM" status "$RELEASE" -n "$NS" >/dev/null 2>&1 || kubectl get ns "$NS" >/dev/null 2>&1; then
    "$HELM" uninstall "$RELEASE" -n "$NS" --wait --timeout 5m >/dev/null 2>&1
    kubectl delete ns "$NS" --wait --timeout=180s >/dev/null && "$HERE/storage.sh" || return 1
  fi
  local prev=$WORK/previous out kv sets=() upgrade=()
  mkdir -p "$prev" && git -C "$ROOT" archive "$PREV_COMMIT" charts/partner-integration deploy/cluster/values.yaml | tar -x -C "$prev" || return 1
  out=$("$HERE/images/release.sh" "$PREV_COMMIT" "v$PREV_VERSION") || return 1
  eval "$(echo "$out" | grep -E '^RELEASE_(SERVICES_TAG|KAFKA_IMAGE|MONGO_WIRE_IMAGE)=')"
  [ -n "${RELEASE_SERVICES_TAG:-}" ] && [ -n "${RELEASE_KAFKA_IMAGE:-}" ] && [ -n "${RELEASE_MONGO_WIRE_IMAGE:-}" ] || { echo "release.sh named no image: $out" >&2; return 1; }
  namespace || return 1
  while read -r kv; do sets+=(--set "$kv"); done < <(image_values "$RELEASE_SERVICES_TAG" "$RELEASE_KAFKA_IMAGE" "$RELEASE_MONGO_WIRE_IMAGE"; printf '%s\n' "${UPGRADE_SETTINGS[@]}")
  # Its own chart and its own cluster values, with this run's smaller requests (keys it does not know are ignored).
  log "installing v$PREV_VERSION ($PREV_COMMIT, chart $PREV_CHART)"
  "$HELM" install "$RELEASE" "$prev/charts/partner-integration" -n "$NS" -f "$prev/deploy/cluster/values.yaml" -f "$HERE/values-sizes.yaml" \
    "${sets[@]}" --wait --timeout 15m || return 1
  kubectl -n "$NS" get secret "$RELEASE-gateway-tls" -o jsonpath='{.data.ca\.crt}' | base64 -d >"$WORK/ca.crt" || return 1
  ingress_ready || return 1
  receiver_address || return 1
  local rc
  (cd "$ROOT" && E2E_RESOLVE="$HOST=$INGRESS_IP" NODE_EXTRA_CA_CERTS="$WORK/ca.crt" NODE_OPTIONS="--require $ROOT/test/support/resolve.cjs" \
    CLUSTER_NAMESPACE=$NS CLUSTER_RELEASE=$RELEASE CLUSTER_INGRESS="https://$HOST" \
    CLUSTER_VALUES="$(IFS=,; echo "${VALUES[*]}")" HELM_BIN=$HELM KUBECTL="$BIN/kubectl" \
    UPGRADE_CHART="$ROOT/charts/partner-integration" UPGRADE_FROM_VERSION="$PREV_VERSION" UPGRADE_FROM_CHART="$PREV_CHART" \
    UPGRADE_SETS="$( (image_values "$SERVICES_TAG" "$KAFKA_IMAGE" "$MONGO_WIRE_IMAGE"; printf '%s\n' "${UPGRADE_SETTINGS[@]}") | node -e 'console.log(JSON.stringify(require("fs").readFileSync(0, "utf8").trim().split("\n")))')" \
    UPGRADE_RECEIVER="url=https://$RECEIVER_HOST/webhooks,listen=$RECEIVER_IP:443,cert=$WORK/receiver.crt,key=$WORK/receiver.key" \
    node --experimental-vm-modules --no-warnings=ExperimentalWarning node_modules/jest/bin/jest.js \
      --config jest.cluster.config.js --runInBand --testPathIgnorePatterns /node_modules/ -- test/cluster/release-upgrade.test.ts); rc=$?
  return $rc
}
if [ "${CLUSTER_UPGRADE:-1}" = 1 ]; then
  step "upgrade from v$PREV_VERSION (its chart and images) to this commit and rollback, under partner traffic" upgrade_and_rollback
fi

if ! step "helm install --wait (namespace $NS, PodSecurity restricted)" install; then
  kubectl -n "$NS" get pods -o wide; kubectl -n "$NS" get events --sort-by=.lastTimestamp | tail -30
  finish
fi

# /readyz is not published by the ingress: the gateway's own port, through a port-forward (started
# again whenever it ends, e.g. when the rollout tests replace the pod it was bound to).
port_forward() {
  ( while :; do
      kubectl -n "$NS" port-forward "svc/$RELEASE-gateway" "$PF_PORT:8080" >"$WORK/pf.log" 2>&1 &
      echo $! >"$WORK/pf.pid"; wait $!; sleep 1
    done ) &
  pf_loop=$!
}
ready() { # the gateway's /readyz (port-forward), then the API through the ingress over verified HTTPS
  kubectl -n "$NS" get secret "$RELEASE-gateway-tls" -o jsonpath='{.data.ca\.crt}' | base64 -d >"$WORK/ca.crt" || return 1
  port_forward
  local ok=""
  for _ in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PF_PORT/readyz")" = 200 ] && { ok=1; break; }
    sleep 2
  done
  [ -n "$ok" ] || { curl -s "http://127.0.0.1:$PF_PORT/readyz"; cat "$WORK/pf.log"; return 1; }
  ingress_ready
}
step "ready: /readyz on the gateway (port-forward), https://$HOST through the ingress ($INGRESS_IP), certificate verified" ready

suite() {
  (cd "$ROOT" && E2E_BASE_URL="https://$HOST" E2E_READY_URL="http://127.0.0.1:$PF_PORT/readyz" \
    E2E_RESOLVE="$HOST=$INGRESS_IP" NODE_EXTRA_CA_CERTS="$WORK/ca.crt" NODE_OPTIONS="--require $ROOT/test/support/resolve.cjs" \
    E2E_OPS="$BIN/kubectl --kubeconfig $KUBECONFIG -n $NS exec deploy/$RELEASE-ops -- node services/ops/dist/main.js" \
    CLUSTER_NAMESPACE=$NS CLUSTER_RELEASE=$RELEASE CLUSTER_INGRESS="https://$HOST" CLUSTER_INGRESS_HTTP="http://$HOST" \
    CLUSTER_VALUES="$(IFS=,; echo "${VALUES[*]}")" HELM_BIN=$HELM KUBECTL="$BIN/kubectl" \
    node --experimental-vm-modules --no-warnings=ExperimentalWarning node_modules/jest/bin/jest.js \
      --config jest.cluster.config.js --runInBand)
}
step "black-box suite and cluster tests (jest)" suite

partner_tools() {
  receiver_address || return 1
  cat "$WORK/ca.crt" "$WORK/partner-ca.crt" >"$WORK/cas.crt"
  local rc
  (cd "$ROOT" && PARTNER_TOOLS_GATEWAY="https://$HOST" PT_CA="$WORK/cas.crt" PT_RESOLVE="$HOST=$INGRESS_IP" \
    PT_OPS="$BIN/kubectl --kubeconfig $KUBECONFIG -n $NS exec -i deploy/$RELEASE-ops -- node services/ops/dist/main.js" \
    PT_WEBHOOK_RECEIVER="url=https://$RECEIVER_HOST/webhooks,listen=$RECEIVER_IP:443,cert=$WORK/receiver.crt,key=$WORK/receiver.key" \
    bash deploy/checks/partner-tools.sh); rc=$?
  [ $rc = 0 ] || { grep '"ok":false' "$ROOT/.state/partner-tools-cluster/run.log" | tail -20; return $rc; }
}
step "partner tools through the ingress (https://$HOST, TLS verified): OAuth libraries, private_key_jwt with discovery, Stripe verifiers on delivered webhooks" partner_tools
# Without --logs: the test pod is deleted when it succeeds (hook-succeeded), before helm could read
# its logs; a failed one stays, and its logs are printed here.
helm_test() {
  "$HELM" test "$RELEASE" -n "$NS" --timeout 5m && return 0
  kubectl -n "$NS" logs "$RELEASE-helm-test" 2>&1 | tail -n 50
  return 1
}
step "helm test" helm_test

[ "${KEEP:-0}" = 1 ] && finish
uninstall() {
  "$HELM" uninstall "$RELEASE" -n "$NS" --wait --timeout 5m || return 1
  # Pods drain (preStop, grace period) and claims go (their StatefulSets' retention policy) after
  # their owners are deleted: wait for both before judging.
  kubectl -n "$NS" wait --for=delete pod --all --timeout=180s >/dev/null 2>&1
  kubectl -n "$NS" wait --for=delete pvc --all --timeout=120s >/dev/null 2>&1
  # Kept on purpose by the chart (helm.sh/resource-policy: keep): the credential pepper, the data
  # keys (DATA_KEYS), the databases' passwords, the Kafka users' passwords, the service identities and the ingress's CA and
  # certificate, which stored data or clients depend on. Anything else left is a leak.
  local left
  left=$(kubectl -n "$NS" get all,pvc,configmap,secret,serviceaccount,networkpolicy,ingress,pdb,hpa,role,rolebinding,job,gateway,httproute,servicemonitor,podmonitor,prometheusrule \
    -l app.kubernetes.io/instance="$RELEASE" -o name | grep -vE "^secret/$RELEASE-(credential-pepper|data-keys|[a-z-]+-mongodb|[a-z-]+-mongodb-user|[a-z-]+-identity|ingress-ca|gateway-tls|kafka-users)$")
  left+=$(kubectl -n "$NS" get pvc,pods -o name)
  if [ -n "$left" ]; then echo "left after uninstall:"; echo "$left"; return 1; fi
  kubectl delete ns "$NS" --wait --timeout=180s >/dev/null && "$HERE/storage.sh"
}
step "helm uninstall leaves nothing (PVCs included)" uninstall
finish
