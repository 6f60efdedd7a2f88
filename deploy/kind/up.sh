#!/usr/bin/env bash
# Brings the whole partner integration platform up on a local kind cluster and runs the
# end-to-end suite against its ingress:
#
#   deploy/kind/up.sh              create (or reuse) the cluster, install Gateway API's CRDs and
#                                  Traefik, build and deploy with Skaffold, wait for readiness, run
#                                  the black-box suite
#   deploy/kind/up.sh --no-e2e     the same without the end-to-end suite
#
# Needs docker, kind, kubectl, helm, skaffold, node 20 and npm on PATH (see deploy/kind/README.md).
# The cluster stays up afterwards; remove it with `kind delete cluster --name partner-integration`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="partner-integration"
CONTEXT="kind-${CLUSTER}"
# Must match deploy.helm.releases[0] of skaffold.yaml.
NAMESPACE="${NAMESPACE:-partner-integration}"
RELEASE="${RELEASE:-pi}"
BASE_URL="${E2E_BASE_URL:-https://localhost}"
# The ingress controller: Traefik (its official image, this version) with its Kubernetes Ingress and
# Gateway API providers, from the same manifest as deploy/cluster's; Gateway API's CRDs vendored in
# deploy/crds (ingress-nginx was retired in March 2026).
TRAEFIK_IMAGE="${TRAEFIK_IMAGE:-traefik:v3.5.3}"
# A ClusterIP of kind's Service range (10.96.0.0/12) for Traefik's Service.
INGRESS_IP="${INGRESS_IP:-10.97.0.80}"
RUN_E2E=1

for arg in "$@"; do
  case "$arg" in
    --no-e2e) RUN_E2E=0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
  esac
done

step() { printf '\n==> %s\n' "$*"; }
die() { echo "error: $*" >&2; exit 1; }

step "checking the prerequisites"
for tool in docker kind kubectl helm skaffold node npm curl; do
  command -v "$tool" > /dev/null || die "$tool is not on PATH (see deploy/kind/README.md)"
done
docker info > /dev/null 2>&1 || die "the Docker engine does not answer (is it running, and may this user use it?)"

step "creating the kind cluster ${CLUSTER} (reused when it exists)"
if kind get clusters 2> /dev/null | grep -qx "${CLUSTER}"; then
  echo "cluster ${CLUSTER} exists; reusing it"
else
  kind create cluster --config "${ROOT}/deploy/kind/cluster.yaml" --wait 180s
fi
kubectl config use-context "${CONTEXT}" > /dev/null
KUBECTL=(kubectl --context "${CONTEXT}")

step "installing Gateway API's CRDs and Traefik (${TRAEFIK_IMAGE})"
"${KUBECTL[@]}" apply --server-side --force-conflicts -f "${ROOT}/deploy/crds/gateway-api-v1.3.0"
"${KUBECTL[@]}" wait --for=condition=Established --timeout=60s \
  crd/gatewayclasses.gateway.networking.k8s.io crd/gateways.gateway.networking.k8s.io crd/httproutes.gateway.networking.k8s.io
sed -e "s#image: pi.local/traefik:.*#image: ${TRAEFIK_IMAGE}#" -e "s#imagePullPolicy: Never#imagePullPolicy: IfNotPresent#" \
  -e "s#@INGRESS_IP@#${INGRESS_IP}#g" "${ROOT}/deploy/cluster/manifests/traefik.yaml" | "${KUBECTL[@]}" apply -f -
"${KUBECTL[@]}" apply -f "${ROOT}/deploy/kind/traefik-nodeport.yaml"
"${KUBECTL[@]}" -n pi-ingress rollout status deployment/traefik --timeout=300s

step "building the images and deploying the chart with Skaffold (profile kind)"
cd "${ROOT}"
skaffold run -p kind --kube-context "${CONTEXT}" --status-check=true

step "waiting for every pod of release ${RELEASE} to be ready"
for deploy in gateway auth connection file-intake webhook; do
  "${KUBECTL[@]}" -n "${NAMESPACE}" rollout status "deployment/${RELEASE}-${deploy}" --timeout=600s
done
"${KUBECTL[@]}" -n "${NAMESPACE}" wait --for=condition=ready pod \
  --selector="app.kubernetes.io/instance=${RELEASE}" --field-selector=status.phase=Running --timeout=600s

# HTTPS with the chart's own certificate (ingress.host=localhost, skaffold.yaml): trust its CA only.
CA_FILE="${ROOT}/.state/kind-ingress-ca.crt"
mkdir -p "${ROOT}/.state"
"${KUBECTL[@]}" -n "${NAMESPACE}" get secret "${RELEASE}-gateway-tls" -o jsonpath='{.data.ca\.crt}' | base64 -d > "${CA_FILE}"

step "waiting for ${BASE_URL} through Traefik and the chart's HTTPRoute (HTTPS, certificate verified)"
deadline=$((SECONDS + 300))
until [ "$(curl -s --cacert "${CA_FILE}" -o /dev/null -w '%{http_code}' "${BASE_URL}/openapi.json")" = "200" ]; do
  if [ "${SECONDS}" -ge "${deadline}" ]; then
    "${KUBECTL[@]}" -n "${NAMESPACE}" get pods -o wide || true
    die "${BASE_URL}/openapi.json did not answer 200 within 5 minutes"
  fi
  sleep 3
done
echo "ready: ${BASE_URL} answers (its CA is in ${CA_FILE})"

OPS="kubectl --context ${CONTEXT} exec -n ${NAMESPACE} deploy/${RELEASE}-ops -- node services/ops/dist/main.js"
if [ "${RUN_E2E}" = "1" ]; then
  step "running the end-to-end suite against ${BASE_URL}"
  echo "E2E_BASE_URL=${BASE_URL}"
  echo "E2E_OPS=${OPS}"
  # /readyz is not published by the ingress: the suite reads it on the gateway's own port.
  "${KUBECTL[@]}" -n "${NAMESPACE}" port-forward "svc/${RELEASE}-gateway" 18080:8080 > /dev/null 2>&1 &
  PF=$!
  trap 'kill ${PF} 2> /dev/null' EXIT
  sleep 2
  E2E_BASE_URL="${BASE_URL}" E2E_READY_URL="http://127.0.0.1:18080/readyz" NODE_EXTRA_CA_CERTS="${CA_FILE}" \
    E2E_OPS="${OPS}" npm test -- test/blackbox
fi

step "done"
cat <<EOF
Partner API:        ${BASE_URL}
Operator commands:  ${OPS} info --json
Remove everything:  kind delete cluster --name ${CLUSTER}
EOF
