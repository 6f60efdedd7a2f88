#!/usr/bin/env bash
# npm run test:cluster: the chart on a real Kubernetes, end to end.
#
#   1. deploy/cluster/up.sh (reuses a running cluster)
#   2. builds the images (services, Kafka, MongoDB-wire stand-in) and loads them into the node
#   3. a namespace labelled for PodSecurity "restricted" enforcement; helm install --wait with
#      deploy/cluster/values.yaml
#   4. jest (jest.cluster.config.js): the black-box suite (test/blackbox) through the ingress, the
#      operator CLI through `kubectl exec` in the ops pod (deploy/<release>-ops), and test/cluster (NetworkPolicies admit
#      callers and refuse others, a rolling upgrade and a deleted pod under traffic, PDB/HPA objects)
#   5. helm test
#   6. helm uninstall --wait, then nothing of the release may be left (PVCs included); the namespace
#      goes, and the storage pool's volumes are wiped
#
# Environment: KEEP=1 leaves the release installed (and skips 6) for a look around.
# Ends with one line "N passed, M failed" (one per step).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
NS=${CLUSTER_NAMESPACE:-pi-e2e}
RELEASE=${CLUSTER_RELEASE:-pi}
export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$BIN:$PATH
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
}
step "images built and loaded" images || finish

install() {
  kubectl get ns "$NS" >/dev/null 2>&1 || kubectl create ns "$NS" >/dev/null || return 1
  kubectl label --overwrite ns "$NS" pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/enforce-version=latest >/dev/null || return 1
  local sets=()
  for k in gateway auth connection fileIntake webhook ops; do sets+=(--set "$k.image.tag=$SERVICES_TAG"); done
  sets+=(--set "kafka.image.repository=${KAFKA_IMAGE%:*}" --set "kafka.image.tag=${KAFKA_IMAGE##*:}")
  [ -n "${MONGO_WIRE_IMAGE:-}" ] && sets+=(--set "mongodb.standIn.image.repository=${MONGO_WIRE_IMAGE%:*}" \
    --set "mongodb.standIn.image.tag=${MONGO_WIRE_IMAGE##*:}")
  "$HELM" upgrade --install "$RELEASE" "$ROOT/charts/partner-integration" -n "$NS" \
    -f "$HERE/values.yaml" "${sets[@]}" --wait --timeout 15m
}
if ! step "helm install --wait (namespace $NS, PodSecurity restricted)" install; then
  kubectl -n "$NS" get pods -o wide; kubectl -n "$NS" get events --sort-by=.lastTimestamp | tail -30
  finish
fi

ready() { # the partner API answers /readyz through the ingress
  for _ in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$INGRESS_IP/readyz")" = 200 ] && return 0
    sleep 2
  done
  curl -s "http://$INGRESS_IP/readyz"; echo; return 1
}
step "ready through the ingress (http://$INGRESS_IP/readyz)" ready

suite() {
  (cd "$ROOT" && E2E_BASE_URL="http://$INGRESS_IP" \
    E2E_OPS="$BIN/kubectl --kubeconfig $KUBECONFIG -n $NS exec deploy/$RELEASE-ops -- node services/ops/dist/main.js" \
    CLUSTER_NAMESPACE=$NS CLUSTER_RELEASE=$RELEASE CLUSTER_INGRESS="http://$INGRESS_IP" \
    CLUSTER_VALUES="$HERE/values.yaml" HELM_BIN=$HELM KUBECTL="$BIN/kubectl" \
    node --experimental-vm-modules --no-warnings=ExperimentalWarning node_modules/jest/bin/jest.js \
      --config jest.cluster.config.js --runInBand)
}
step "black-box suite and cluster tests (jest)" suite
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
  # keys (DATA_KEYS) and the databases' passwords, which stored data depends on. Anything else left is a leak.
  local left
  left=$(kubectl -n "$NS" get all,pvc,configmap,secret,serviceaccount,networkpolicy,ingress,pdb,hpa,role,rolebinding,job \
    -l app.kubernetes.io/instance="$RELEASE" -o name | grep -vE "^secret/$RELEASE-(credential-pepper|data-keys|[a-z-]+-mongodb)$")
  left+=$(kubectl -n "$NS" get pvc,pods -o name)
  if [ -n "$left" ]; then echo "left after uninstall:"; echo "$left"; return 1; fi
  kubectl delete ns "$NS" --wait --timeout=180s >/dev/null && "$HERE/storage.sh"
}
step "helm uninstall leaves nothing (PVCs included)" uninstall
finish
